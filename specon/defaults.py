"""The shipped algorithm parameters: one source of truth for the simulator, manager and agent.

Chosen by `specon simulate paper-30 --sweep ...` (docs/parameters.md has the evidence and the
selection rule); change them here only with a new sweep.
"""

#: SpeCon threshold: normalised loss progress per minute (docs/normalisation.md).
ALPHA = 0.01
#: Categorisation interval and FlowCon's base interval, in seconds.
INTERVAL_S = 120.0
#: FlowCon threshold on growth efficiency (progress per minute per core).
FLOWCON_ALPHA = 0.01
#: FlowCon floor factor: a limit never goes below 1/(beta*n). 1 = never below the equal share.
FLOWCON_BETA = 1.0
#: Cap of FlowCon's exponential back-off, in seconds.
FLOWCON_MAX_INTERVAL_S = 480.0
#: A job whose last this many categorisation intervals logged losses but no finite one (NaN
#: or inf only) is watching, not progressing (docs/parameters.md, "No valid loss").
NO_VALID_LOSS_INTERVALS = 3
#: A categorisation interval in which a job logged at under SLOW_PACE of its top pace (log
#: lines per second, i.e. steps per second at a fixed logging period) cannot demote it: it
#: was held back, not flattening (docs/algorithms.md, "Slow intervals"). At most
#: SLOW_PACE_INTERVALS such intervals in a row are skipped; then the slow pace is its pace.
SLOW_PACE = 0.2
SLOW_PACE_INTERVALS = 10
#: SpeCon weights of progressing, watching and converged jobs (Algorithm 4).
WEIGHTS = (2.0, 1.5, 1.0)
#: Quality targets and deadlines (docs/qos.md): the lowest limit, in cores, of a job that yields
#: to one that would miss its deadline (benchmarks/qos_floor.py: targets-short / deadlines-short
#: met with 0.02: 37.4 / 36.0; 0.05: 35.1 / 35.9; 0.1: 32.4 / 32.7; 0.25: 25.5 / 23.6). Lower
#: all but stops the jobs that yield for little more; 0.05 keeps them at a twentieth of a core.
QOS_FLOOR_CORES = 0.05
#: The policy that ships (specon.core.policy): the progress-aware one, chosen on the random
#: suite (docs/parameters.md, "Which policy ships").
POLICY = "progress"

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
#: SpeCon weights of progressing, watching and converged jobs (Algorithm 4).
WEIGHTS = (2.0, 1.5, 1.0)
#: Quality targets and deadlines (docs/qos.md): the lowest limit, in cores, of a job that yields
#: to one that would miss its deadline. Lower meets more deadlines and targets in the
#: simulator (0.02: 35.7 of 40; 0.05: 33.9; 0.1: 30.8; 0.25: 23.6 on deadlines-short) but
#: nearly stops the jobs that yield; 0.05 keeps them moving at a twentieth of a core.
QOS_FLOOR_CORES = 0.05

"""The progress-aware policy's loads and its rule on a node; the prediction that placement
(:mod:`specon.core.placement`) and moves (:mod:`specon.core.move_plan`) are made from.

A job's progress tells how much work it has left: its reported step and total steps (the SDK,
``specon.io/total-steps``), or, without a total, an estimate from what it has done. With the
work left, its per-step cost and its speed-up table, these rules do what shortest-remaining-
first does for one machine, across a cluster of workers of different sizes and speeds:

* **On a node** (:func:`node_shares`): every job keeps a small floor (it never starves and its
  loss stays visible); a job held back too long (``starved``) gets its equal share of the
  node back first; then the node's last job (the longest of :func:`critical`'s: jobs that
  would outlast all the others' work even at their top speed; never one whose length is a
  guess) gets its fastest width up to a core or its equal
  share, since holding it back only moves the node's end (only jobs so short that they move
  it by LAST_JOB_SLACK at most go before it); then one core each in order of
  least work left; then the spare cores,
  one at a time, to the job whose speed they raise the most per unit of its work left
  (heSRPT's rule under sub-linear speed-up: short jobs and jobs that scale get them). The
  category weights (2 / 1.5 / 1) divide each job's work left in that order: a progressing job
  goes before a converged one with up to twice its work left, so the CPU still flows to the
  jobs whose loss still falls (FlowCon's aim) without letting a long job hold a node. A
  progressing job counts at most ``EARLY_FACTOR`` times the work it has done: a job's first
  minutes are its steepest, so a new job's loss starts to fall at once instead of waiting
  behind every shorter job (Smith's rule for the milestone "90% of its loss reduction"
  before the completion, with the steep part's end estimated from the work done so far).
* **A node's future** (:func:`predicted_times`): each job's predicted time to finish, the
  node modelled as one machine of ``cpus x speed`` capacity whose jobs cannot run faster than
  their own top speed, served in the order above. A new job goes where it adds the least to
  that sum (:mod:`specon.core.placement`); a job moves when the sum falls by more than the
  move costs (:mod:`specon.core.move_plan`).

How a job's load is measured on a real node and known to the manager (its cores, its work
left, a new pod as the typical job of its kind) is :mod:`specon.core.job_loads`.

Pure: state in, decisions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specon.core.categorize import Category
from specon.core.scoring import Weights
from specon.core.speedup import Curve, thread_speed

WEIGHTS = Weights()
#: A job whose steps fall behind what equal shares of its node would have given it since it
#: arrived by more than (FAIR_LAG - 1) times its total steps is served first, at its equal
#: share (:func:`behind_equal_share`): it then keeps pace with equal shares, so it finishes by
#: the time equal shares would have given it FAIR_LAG times its steps.
FAIR_LAG = 1.25
#: A job whose own time at its top speed is at least this share of its node's time to do all
#: its work is the node's last job (:func:`critical`): served right after starved jobs and
#: the jobs LAST_JOB_SLACK lets go first.
CRITICAL_SHARE = 1.0
#: Jobs whose key is under this share of the last job's time at its top speed still go before
#: it (a new job's first minutes, a nearly finished job): the node ends that much later at most.
LAST_JOB_SLACK = 0.01
#: On a node a progressing job is ordered by the smaller of its weighted work left and this
#: many times the work it has done (docs/algorithms.md, "Early progress").
EARLY_FACTOR = 2.0
#: Cores every job keeps at least (CFS quota floor), and the share of a node the floors may take.
FLOOR_CORES = 0.05
FLOOR_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class JobLoad:
    """One job as the policy sees it."""

    name: str
    work: float  # seconds of work left on one core of a speed-1 worker
    curve: Curve  # its speed-up table
    cap: float  # the most cores it can use on this worker
    category: Category = Category.PROGRESSING
    #: Threads it runs, when it cannot follow a thread hint (None: it runs as many as its
    #: limit allows). A fixed count held to fewer cores pays the oversubscription penalty.
    threads: float | None = None
    #: Held back too long (behind what equal shares would have given it: FAIR_LAG,
    #: :func:`behind_equal_share`): served before every job that is not, up to its equal share.
    starved: bool = False
    #: Work it has done so far (the unit of ``work``); None when not known.
    attained: float | None = None
    #: Can be moved later by checkpoint and restore (a new pod: its ``specon.io/migratable``
    #: label); one that cannot is placed with its speed-up in doubt (SERIAL_TIME_BOUND).
    movable: bool = True
    #: Its work left is a guess: it declares no total steps, so it is taken to have as much
    #: again as it has done (specon.core.job_loads.steps_left), which for a young job is far
    #: less than it will turn out to have. Placement and moves count it at least as a typical
    #: job that declares its total (:func:`guess_floor`); the node rule takes the guess.
    guessed: bool = False

    def speed(self, cores: float) -> float:
        if self.threads is None:
            return self.curve.at(cores)
        return thread_speed(self.curve, self.threads, cores)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    name: str
    cpus: float
    speed: float
    jobs: tuple[JobLoad, ...] = ()

    @property
    def capacity(self) -> float:
        return self.cpus * self.speed


def _key(job: JobLoad, weights: Weights, early: bool = True) -> tuple[bool, float]:
    """Order of service: starved jobs first, then least work left, scaled by the category's
    weight; with ``early``, a progressing job's key is at most EARLY_FACTOR times the work it
    has done."""
    key = job.work * weights.converged / max(weights.of(job.category), 1e-9)
    if early and job.attained is not None and job.category is Category.PROGRESSING:
        key = min(key, EARLY_FACTOR * job.attained)
    return (not job.starved, key)


def behind_equal_share(done_steps: float, fair_steps: float, total_steps: float) -> bool:
    """Whether a job has fallen too far behind equal shares (FAIR_LAG): ``fair_steps`` is what
    an equal share of the node(s) it ran on would have done since it arrived, ``total_steps``
    its total as known (declared, or estimated)."""
    return fair_steps - done_steps > (FAIR_LAG - 1.0) * total_steps


def guess_floor(nodes: Sequence[NodeLoad]) -> float:
    """The least work left placement and moves count a job whose work is a guess at
    (:attr:`JobLoad.guessed`): the mean work left of the jobs on ``nodes`` that declare their
    totals, what a job of which nothing else is known has left on average (0: none declared,
    nothing to go by). A young job that declares no total is guessed at as much again as its
    first minutes; taken at that, a node of such jobs looks empty and new jobs crowd onto it
    (issue 28: in the simulator, once its guess was the agent's, 24 jobs on a 4-core node, one
    of them 2.17 times its default time; the median instead of the mean kept more of that:
    docs/parameters.md)."""
    declared = [j.work for n in nodes for j in n.jobs if not j.guessed and j.work > 0]
    return sum(declared) / len(declared) if declared else 0.0


def floored(job: JobLoad, floor: float) -> JobLoad:
    """``job`` with at least ``floor`` work left if its work is a guess (:func:`guess_floor`)."""
    return replace(job, work=floor) if job.guessed and job.work < floor else job


def guesses_floored(nodes: Sequence[NodeLoad], floor: float) -> list[NodeLoad]:
    """``nodes`` with each job :func:`floored` at ``floor``."""
    return [n if not any(j.guessed and j.work < floor for j in n.jobs) else replace(
        n, jobs=tuple(floored(j, floor) for j in n.jobs)) for n in nodes]


def _top_time(job: JobLoad, cpus: float) -> float:
    """Seconds the job needs at its best speed within its cap on ``cpus`` speed-1 CPUs."""
    return job.work / max(job.curve.envelope(min(job.cap, cpus)), 1e-12)


def critical(cpus: float, jobs: Sequence[JobLoad]) -> frozenset[str]:
    """The jobs that alone set when the node's work ends: each one's time at its top speed
    (its work over its speed at its cap) is at least CRITICAL_SHARE of the node's time to do
    all its jobs' work on all its cores. Holding such a job back lengthens the node's
    makespan one for one; serving it at its top speed first costs the others only the cores
    it can use, and they still finish before it."""
    total = sum(j.work for j in jobs) / cpus
    return frozenset(j.name for j in jobs
                     if j.work > 0 and _top_time(j, cpus) >= CRITICAL_SHARE * total)


def node_shares(cpus: float, jobs: Sequence[JobLoad], weights: Weights = WEIGHTS,
                floor: float = FLOOR_CORES, fair: float = 0.0) -> dict[str, float]:
    """Cores per job on one node (a limit each; their sum is at most ``cpus``).

    ``fair``: the share of an equal split every job keeps (a bound on how far behind its fair
    share a long job can fall); ``floor``: the fewest cores a job keeps in any case.
    """
    if not jobs:
        return {}
    floor = min(floor, FLOOR_SHARE * cpus / len(jobs))
    fair_cores = fair * cpus / len(jobs)
    out = {j.name: min(max(floor, fair_cores if j.category is Category.PROGRESSING else 0.0),
                       j.cap) for j in jobs}
    left = cpus - sum(out.values())
    order = sorted(jobs, key=lambda j: (_key(j, weights), j.name))
    equal = cpus / len(jobs)
    for j in order:  # starved jobs first, up to their equal share
        if not j.starved or left <= 1e-12:
            break
        give = min(j.cap - out[j.name], equal - out[j.name], left)
        if give <= 0:
            continue
        out[j.name] += give
        left -= give
    names = critical(cpus, jobs)
    # the node's last job: the longest of its critical jobs, a guessed one never (its work is
    # a guess). Each of several long jobs that cannot fill the node taking its equal share
    # first held a new short job beside them at one core (docs/parameters.md)
    longest = max((x for x in order if x.name in names and not x.guessed),
                  key=lambda x: (_top_time(x, cpus), x.name), default=None)
    # the jobs so short (by their key: a new job's is its first minutes) that serving them
    # first moves the node's end by at most LAST_JOB_SLACK of its last job's time
    short = -1.0 if longest is None else LAST_JOB_SLACK * _top_time(longest, cpus)
    left = _up_to_a_core(out, [j for j in order if not j.starved and j.name not in names
                               and _key(j, weights)[1] <= short], left)
    if longest is not None:  # then the node's last job, a core or its equal share
        name = longest.name
        most = min(longest.cap, max(1.0, equal), out[name] + left)
        # its fastest width within that (more threads than it can use slow some jobs down)
        widths = [float(c) for c in range(1, int(most) + 1)] + [most]
        give = max(widths, key=lambda c: (longest.speed(c), -c)) - out[name]
        if give > 0:
            out[name] += give
            left -= give
    left = _up_to_a_core(out, order, left)
    # spare cores, a core at a time, to the largest cut in time-to-finish per unit of work
    while left > 1e-9:
        best, gain_best, step_best = None, 0.0, 0.0
        for j in order:
            c = out[j.name]
            step = min(1.0, j.cap - c, left)
            if step <= 1e-9:
                continue
            s0, s1 = j.speed(c), j.speed(c + step)
            if s1 <= s0 + 1e-12:
                continue
            # the share of its remaining work the job finishes per second grows by this much
            # per unit of its work left, not of its early key: the early key decides who runs
            # first, not how wide (widening a new job by its near-zero work done took every
            # spare core from a job that had nearly finished)
            gain = (s1 - s0) / max(_key(j, weights, early=False)[1], 1e-9)
            if gain > gain_best:
                best, gain_best, step_best = j, gain, step
        if best is None:
            break
        out[best.name] += step_best
        left -= step_best
    return out


def _up_to_a_core(out: dict[str, float], jobs: Sequence[JobLoad], left: float) -> float:
    """Raise each of ``jobs``, in order, to a core (or its cap) out of the ``left`` cores;
    what is left after."""
    for j in jobs:
        if left <= 1e-12:
            break
        give = min(1.0 - out[j.name], j.cap - out[j.name], left)
        if give > 0:
            out[j.name] += give
            left -= give
    return left


def top_rate(job: JobLoad, node: NodeLoad) -> float:
    """Seconds of work per second the job does at best on ``node``."""
    return job.curve.envelope(min(job.cap, node.cpus)) * node.speed


def predicted_times(node: NodeLoad, extra: JobLoad | None = None,
                    weights: Weights = WEIGHTS) -> dict[str, float]:
    """Predicted time to finish of each of the node's jobs, ``extra`` included: the node as one
    machine of ``cpus x speed`` capacity served in the policy's order, each job as fast as its
    top speed allows and the capacity it leaves to the next (a job that cannot use the whole
    node, served first, delays the others by what it uses, not by its whole work)."""
    jobs = list(node.jobs) + ([extra] if extra is not None else [])
    order = sorted(jobs, key=lambda j: (_key(j, weights), j.name))
    left = [j.work for j in order]
    top = [max(top_rate(j, node), 1e-12) for j in order]
    running = list(range(len(order)))
    out: dict[str, float] = {}
    now = 0.0
    while running:
        rates, free = {}, node.capacity
        for i in running:
            if free <= 1e-12:
                break
            rates[i] = min(top[i], free)
            free -= rates[i]
        dt = min(left[i] / r for i, r in rates.items())
        now += dt
        still = []
        for i in running:
            r = rates.get(i, 0.0)
            left[i] -= r * dt
            if r > 0 and left[i] <= 1e-9 * max(order[i].work, 1.0):
                out[order[i].name] = now
            else:
                still.append(i)
        running = still
    return out


def predicted_sum(node: NodeLoad, extra: JobLoad | None = None,
                  weights: Weights = WEIGHTS) -> float:
    """Predicted sum of the node's jobs' times to finish, ``extra`` included
    (:func:`predicted_times`)."""
    return sum(predicted_times(node, extra, weights).values())


def backlog(node: NodeLoad) -> float:
    """Seconds the node needs to serve all its work at full capacity."""
    return sum(j.work for j in node.jobs) / node.capacity


#: How many nodes, the least loaded, placement and moves look at (a large cluster's cost).
CANDIDATES = 16
#: A new pod's kind is read from the jobs of at most this many nodes that run jobs of it
#: (:func:`new_job_load`; the same cost as the candidates').
KIND_NODES = 16


def load_key(work: float, capacity: float, name: str) -> tuple[float, float, str]:
    """The order of nodes from least to most loaded: backlog (work / capacity), then the
    larger, then by name (what a caller holding only sums sorts by, too)."""
    return work / capacity, -capacity, name


def least_loaded(nodes: Sequence[NodeLoad], k: int = CANDIDATES) -> list[NodeLoad]:
    """The ``k`` nodes with the least backlog (ties: the larger, then by name)."""
    return sorted(nodes, key=lambda n: load_key(sum(j.work for j in n.jobs), n.capacity,
                                                n.name))[:k]

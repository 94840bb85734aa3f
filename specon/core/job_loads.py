"""A job's load as a node agent measures it and as the manager knows it: the cores it can use
(:func:`demand_cap`), its work left from its steps and CPU (:func:`measured_load`), a reported
job as the policy sees it on a real node (:func:`reported_load`), and a new pod as the typical
job of its kind or of the least loaded nodes (:func:`new_job_load`).

Pure: the agent, the manager and the simulator's manager view call the same functions; the
rules that act on these loads are in :mod:`specon.core.progress`.
"""

from __future__ import annotations

from collections.abc import Sequence

from specon.core.categorize import Category
from specon.core.progress import FLOOR_CORES, JobLoad, NodeLoad, behind_equal_share
from specon.core.speedup import Curve

#: A job that used less than this share of its limit over an interval, and whose threads did
#: not wait for a CPU (WAITED_SHARE), was not held back: what it used is what it needs (a loop
#: that sleeps or waits on I/O), and a CFS quota is a hard cap, so cores given beyond that sit
#: idle while another job is held at its floor.
UNTHROTTLED_SHARE = 0.8
#: A job was held back (by its own quota or by a busy host) when some thread of it waited for a
#: CPU (its cgroup's PSI ``cpu.pressure`` "some", which counts both) for at least this share of
#: the interval. Measured on a 2-core host (kernel 6.18, tests/agent/test_cpu_pressure.py): a
#: loop throttled to 0.2 core waited 42-80% of the time, three busy threads on two cores 50%, a
#: loop that sleeps 1%. Use under a limit alone cannot tell "does not need" from "cannot get".
#: An absolute share, not one scaled by the cores left unused: on the real-node e2e a sleeping
#: job's limit went 0.05 -> 1 -> 0.05 each round under a scaled bar (0.25 x the cores left
#: unused), which at the 0.05-core floor is under 1% of the time.
WAITED_SHARE = 0.1
#: Such a job's cap is what it used times this, and never below FLOOR_CORES.
DEMAND_HEADROOM = 1.5
#: The shortest interval whose CPU use says what a job needs (shorter: too noisy to act on).
DEMAND_MIN_WINDOW_S = 5.0
#: A job that declares no total steps is taken to have this many times the steps it has done
#: still to do (the least-attained-service guess: nothing else is known of it). 2, 3 and 4 were
#: tried on the widened suite with noisy logs (2026-11-29): worse time to 90% at the worst
#: workload in the simulator's truth (+18% to +20% against +10%), no better elsewhere.
UNDECLARED_LEFT = 1.0


def steps_left(step: float, total: float | None) -> float:
    """The steps a job at ``step`` has left: to its declared ``total``, or, without one,
    UNDECLARED_LEFT times the steps it has done (nothing else is known of it)."""
    return max(0.0, total - step) if total is not None else UNDECLARED_LEFT * max(0.0, step)


def demand_cap(used_cores: float, limit_cores: float | None, cpus: float,
               waited: float | None) -> float:
    """The most cores a job on a real node can use (:attr:`JobLoad.cap`), from what it used
    (``used_cores``) over an interval under a limit of ``limit_cores`` (None: unlimited), and
    the share of that interval some thread of it waited for a CPU (``waited``, 0..1; None: not
    known). The node's CPUs while it may have been held back: it used at least
    UNTHROTTLED_SHARE of its limit, or it waited (WAITED_SHARE), or its waiting is not known;
    else what it used with DEMAND_HEADROOM. A job that needs more than that reaches its cap,
    waits, and gets the node's CPUs as its cap again at the next interval."""
    limit = cpus if limit_cores is None else min(limit_cores, cpus)
    if not used_cores >= 0 or used_cores >= UNTHROTTLED_SHARE * limit - 1e-9:
        return cpus
    if waited is None or not waited < WAITED_SHARE:
        return cpus
    return min(cpus, max(FLOOR_CORES, used_cores * DEMAND_HEADROOM))


def measured_load(name: str, step: float, total: float | None, cpu_s: float, cpus: float,
                  category: Category = Category.PROGRESSING, fair_cpu_s: float = 0.0,
                  measured_steps: float | None = None, cap: float | None = None) -> JobLoad:
    """A job as a node agent measures it: at step ``step``, ``measured_steps`` of them (all by
    default) done in ``cpu_s`` CPU-seconds, ``total`` steps in all when the pod declares them
    (``specon.io/total-steps``), while an equal share of the node would have given it
    ``fair_cpu_s`` CPU-seconds (:func:`behind_equal_share`, over the same span).

    Its work left is (total − step) × CPU-seconds per step, or, without a total, as much again
    as it has done (what the simulator assumes of a job that declares none). Its speed-up is
    not known on a real node: linear up to the node's CPUs (its limit is a cap, and CPU it
    cannot use is given to the others: ``cap``, :func:`demand_cap`, when its use shows it
    needs less). A job with no step measured yet has no work figure and is served first, as
    FlowCon serves a new job: it gets the node until it is measured.
    """
    done = step if measured_steps is None else measured_steps
    if done <= 0 or cpu_s <= 0:
        return reported_load(name, 0.0, cpus, category, cap=cap)
    per_step = cpu_s / done
    left = steps_left(step, total)
    starved = behind_equal_share(done, fair_cpu_s / per_step, done + left)
    return reported_load(name, left * per_step, cpus, category, starved,
                         attained=step * per_step, cap=cap, guessed=total is None)


def reported_load(name: str, work: float, cpus: float,
                  category: Category = Category.PROGRESSING, starved: bool = False,
                  attained: float | None = None, cap: float | None = None,
                  guessed: bool = False) -> JobLoad:
    """A job on a real node of ``cpus`` CPUs with ``work`` CPU-seconds left (what its agent
    reports): its speed-up is not known there, so linear up to the node's CPUs, or up to
    ``cap`` cores when its use shows it needs no more (:func:`demand_cap`); ``guessed``:
    its work is a guess, as it declares no total (:attr:`JobLoad.guessed`)."""
    top = cpus if cap is None or not 0 < cap < cpus else cap
    curve = Curve.of([(1.0, 1.0)] if top <= 1 else [(1.0, 1.0), (top, top)])
    return JobLoad(name, work, curve, top, category, starved=starved, attained=attained,
                   guessed=guessed)


def typical_load(nodes: Sequence[NodeLoad], cpus: float, by_cores: bool = True,
                 name: str = "new") -> JobLoad:
    """A job about to be placed as the manager can know it, nothing of its own being measured
    before it runs: the typical job of ``nodes`` (:func:`typical_job` of their jobs).

    With the nodes' speeds known, the cap matters as much as the work: a typical job taken as
    linear up to the largest node's CPUs makes a big slow node look fast, where most jobs use
    a core or two of it. Without them (``by_cores`` False: a node without a speed label), a
    node's CPUs are the only sign of what it serves, and a one-core typical job spreads the
    jobs as if every node were as fast: on the widened suite that lost more (docs/results.md,
    "The widened suite as the manager sees it")."""
    return typical_job([j for n in nodes for j in n.jobs], cpus, by_cores, name)


def typical_job(jobs: Sequence[JobLoad], cpus: float, by_cores: bool = True,
                name: str = "new") -> JobLoad:
    """The median job of ``jobs`` that have work left: their median work left, linear up to
    ``cpus`` or, ``by_cores``, up to the median of their caps (the cores each showed it can
    use). None with work left: no work, up to ``cpus``."""
    left = [j for j in jobs if j.work > 0]
    if not left:
        return reported_load(name, 0.0, cpus)
    works = sorted(j.work for j in left)
    caps = sorted(j.cap for j in left)
    return reported_load(name, works[len(works) // 2], cpus,
                         cap=caps[len(caps) // 2] if by_cores else None)


def new_job_load(same_kind: Sequence[JobLoad], nodes: Sequence[NodeLoad], cpus: float,
                 by_cores: bool = True, name: str = "new") -> JobLoad:
    """A new pod as the manager can know it: the typical job of its kind (``same_kind``: the
    reported jobs of the same ``specon.io/kind`` label or image in its namespace, on at most
    KIND_NODES nodes anywhere in the cluster) where
    the nodes' speeds are known (``by_cores``) and one of them has work left, else the typical
    job of ``nodes`` (the least loaded: :func:`typical_load`).

    In a large cluster the least loaded nodes are mostly empty, and their typical job has no
    work: every candidate then looks alike and the largest empty node wins, a big slow one as
    readily as a fast one (docs/results.md, "A new pod as the typical job of its kind"). Jobs
    of one image (a sweep's trials) are alike in the cores they use and roughly in their
    work. Without speeds the kind's work, in seconds of nodes of unknown speed, misled more
    than it told (the same section)."""
    if by_cores and any(j.work > 0 for j in same_kind):
        return typical_job(same_kind, cpus, by_cores, name)
    return typical_load(nodes, cpus, by_cores, name)

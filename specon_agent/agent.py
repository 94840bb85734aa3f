"""The agent's control loop: discovery events in, logs read, FlowCon and Algorithm 3 run, limits
written, heartbeats and reallocation requests handed to the manager link.

One thread owns all state (:meth:`Agent.run`); discovery and the manager link only put events
into its queues. :meth:`Agent.step` is one pass of the loop at a given time, so tests can drive
the agent deterministically against real containers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specon import defaults
from specon.core.categorize import Category
from specon.core.flowcon import FlowConParams, FlowList
from specon.core.node import NODE_SHARES, NodeController
from specon.core.policy import Policy, lookup, missing_rules
from specon.core.progress import DEMAND_MIN_WINDOW_S, JobLoad, demand_cap, measured_load
from specon.core.scoring import Weights
from specon.core.threads import threads_for_limit
from specon.core.urgency import Assessment
from specon.wire import (
    CheckpointRequest,
    Heartbeat,
    HeartbeatReply,
    JobReport,
    ReallocationReply,
    ReallocationRequest,
    SavedCheckpoint,
)

from .actuators import Actuator, ActuatorError, ContainerGone, LimitChange
from .checkpoints import SMALL_FILE, CheckpointProofs, Proof, checkpoint_dirfd
from .cpu import CpuMeter
from .discovery import Arrived, Departed, Event, Resync, Target
from .events import LimitEvents, LimitNote, limit_source
from .health import LoopWatchdog, stall_bound
from .link import ManagerLink
from .metrics import BOUNDS, QOS_STATES, AgentMetrics, JobKey
from .progress import ProgressSource
from .qos_tracker import JobQos
from .safefs import ConfinementError, read_beneath, write_beneath
from .tenancy import count_refusals
from .threads import write_thread_hint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopConfig:
    """The parts of the settings the loop itself uses."""

    node: str
    alpha: float = defaults.ALPHA
    interval_s: float = defaults.INTERVAL_S
    flowcon_alpha: float | None = defaults.FLOWCON_ALPHA
    flowcon_beta: float = defaults.FLOWCON_BETA
    flowcon_interval_s: float | None = None
    flowcon_max_interval_s: float = defaults.FLOWCON_MAX_INTERVAL_S
    poll_s: float = 2.0
    tail_bytes: int = 1 << 20
    restore_on_exit: bool = True
    #: The largest checkpoint data file the agent hashes (bytes): a bigger one is refused
    #: before it is read, whatever its manifest says (docs/security.md).
    checkpoint_max_bytes: int = 64 << 30
    #: The longest one pass waits for checkpoint hashes, done by a worker thread (seconds).
    checkpoint_hash_budget_s: float = 0.5
    #: /healthz fails once the loop has not completed a pass for this long (seconds; None:
    #: three poll intervals, at least 30 s: specon_agent.health.stall_bound).
    stall_s: float | None = None
    #: Quality targets and deadlines: how often they are judged, the window of the step rate,
    #: and the lowest limit (cores) a job that can spare CPU is held at.
    qos_interval_s: float = 15.0
    qos_window_s: float = 30.0
    qos_floor_cores: float = defaults.QOS_FLOOR_CORES
    #: The scheduling policy (specon.core.policy) whose node rules the agent runs: FlowCon or
    #: a node share rule, and whether it asks the manager to move converged jobs.
    policy: str = defaults.POLICY

    def flow_params(self) -> FlowConParams:
        itval = self.flowcon_interval_s or self.interval_s
        return FlowConParams(
            alpha=self.flowcon_alpha or self.alpha, itval_s=itval, beta=self.flowcon_beta,
            max_itval_s=max(self.flowcon_max_interval_s, itval))


#: The node share rules the agent runs besides the core's (specon.core.node.NODE_SHARES):
#: CFS's equal shares (with FlowCon's limits when the policy says so) and the QoS rule, which
#: the agent applies over any policy.
OWN_SHARES = frozenset({"equal", "agent-qos"})


def agent_policy(name: str) -> Policy:
    """The policy of that name, if the agent can run its node rules; ValueError (one line,
    naming what is missing) otherwise."""
    policy = lookup(name)
    missing = missing_rules(policy, shares=OWN_SHARES | frozenset(NODE_SHARES))
    if missing:
        raise ValueError(f"policy {name!r}: the agent cannot run its {missing[0]}")
    return policy


def _measured(job: _Followed) -> bool:
    """Whether the job has run a step since the first one it reported (its cost per step can
    be measured)."""
    return job.step1 is not None and job.step > job.step1


@dataclass
class _Followed:
    target: Target
    source: ProgressSource | None
    arrived: float = 0.0
    cpu0: int | None = None  # its CPU counter when it arrived (ns)
    step: float = 0.0  # the last step it reported (records counted when it gives none)
    step0: float = 0.0  # its step when the agent found it (what it logged before)
    #: Its step and CPU counter (ns) at the first step it reported after it was found: its
    #: cost per step is measured from there, so its start-up (imports, data, model) is not
    #: taken for training work; None until then.
    step1: float | None = None
    cpu1: int | None = None
    load: JobLoad | None = None  # what the policy last knew of it (node share rules)
    #: The most cores it showed it can use (specon.core.progress.demand_cap; None: not known,
    #: the node's), and since when (monotonic s) and from which CPU counter (ns) its use under
    #: its present limit is measured (reset when its limit changes).
    cap: float | None = None
    #: CPU-seconds an equal share of the node would have given it since its first step, and
    #: when that was last added to (monotonic s): how far behind equal shares it is
    #: (specon.core.progress.behind_equal_share).
    fair_cpu_s: float = 0.0
    fair_mark: float | None = None
    demand_mark: tuple[float, int, int | None] | None = None
    stats_seen: tuple[int, int, int] = (0, 0, 0)  # rotations, truncations, bytes
    refusal_seen: bool = False  # its progress file was refused (counted once)
    asked: bool = False  # a reallocation was asked (standalone: said once)
    proof: Proof = field(default_factory=Proof)  # its checkpoint folder as last read
    qos: JobQos | None = None  # its target / deadline, when the pod states one
    threads_hint: int | None = None  # the thread count last written into its threads.json


@dataclass
class _Inbox:
    """What the manager link's thread hands to the loop."""

    items: queue.Queue[Any] = field(default_factory=queue.Queue)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


class Agent:
    def __init__(
        self,
        config: LoopConfig,
        actuator: Actuator,
        meter: CpuMeter,
        link: ManagerLink | None = None,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        limit_events: LimitEvents | None = None,
    ) -> None:
        """``clock``: the wall clock, for what is stamped (heartbeats, requests, the QoS
        judgements against deadlines); ``monotonic``: what the loop is scheduled on, so that
        a step of the wall clock never stalls or races it (issue 32); ``limit_events``: where
        each limit change is told (Kubernetes Events on the pod; None: nowhere)."""
        self.limit_events = limit_events
        self.config = config
        self.actuator = actuator
        self.meter = meter
        self.link = link
        self.metrics = metrics or AgentMetrics()
        self.clock = clock
        self.monotonic = monotonic
        #: This agent process, in every heartbeat: the manager hears a restarted agent at once.
        self.boot = uuid.uuid4().hex
        # CPU counters are in nanoseconds (cgroup cpu.stat, Docker's stats).
        self.control = NodeController(config.flow_params(), config.alpha, per_second=1e9)
        self.policy = agent_policy(config.policy)
        self.weights = Weights()
        self.interval_s = config.interval_s
        self.jobs: dict[str, _Followed] = {}
        self.events: queue.Queue[Event] = queue.Queue()
        self._inbox = _Inbox()
        now = monotonic()
        self.next_poll = now
        self.next_cat = now + self.interval_s
        self.next_qos = now + config.qos_interval_s
        self.seq = 0
        self._retry_at = -math.inf
        self.metrics.node_cpus.set(actuator.node_cpus)
        self.proofs = CheckpointProofs(self.metrics, config.checkpoint_max_bytes,
                                       config.checkpoint_hash_budget_s)
        self.watchdog = LoopWatchdog(stall_bound(config.poll_s, config.stall_s))
        if link is not None:
            link._on_reply = lambda reply: self._inbox.items.put(reply)
            link._on_realloc = lambda req, reply: self._inbox.items.put((req, reply))
            link._on_outcome = lambda kind, outcome: self.metrics.manager_calls.labels(
                kind, outcome).inc()
            link.clock = clock  # heartbeats are stamped when sent, by this clock

    # -- arrivals and departures (Algorithm 2's listener) -----------------------------------
    def handle(self, event: Event, now: float | None = None) -> None:
        now = self.monotonic() if now is None else now
        if isinstance(event, Arrived):
            self.arrive(event.target, now)
        elif isinstance(event, Departed):
            self.depart(event.cid, now, "ended")
        elif isinstance(event, Resync):
            wanted = {t.cid: t for t in event.targets}
            for cid in list(self.jobs.keys() - wanted.keys()):
                self.depart(cid, now, "gone (resync)")
            for cid in wanted.keys() - self.jobs.keys():
                self.arrive(wanted[cid], now)

    def _source(self, t: Target) -> ProgressSource | None:
        # One source per job: the SDK writes every record to its file and to stdout alike.
        if t.progress_path is not None and t.progress_path.parent.is_dir():
            return ProgressSource(t.progress_path, "plain", self.config.tail_bytes, t.loss_regex,
                                  root=t.file_root)
        if t.log_path is not None:
            return ProgressSource(t.log_path, t.log_kind, self.config.tail_bytes, t.loss_regex)
        log.warning("%s: neither a progress file nor a log this agent can read", t.name)
        return None

    def arrive(self, target: Target, now: float) -> None:
        if target.cid in self.jobs:
            return
        source = self._source(target)
        count_refusals(target.name, target.file_refusals, self.metrics.confinement_refusals)
        self.actuator.register(target.cid, target.namespace, target.pod, target.container)
        self.jobs[target.cid] = job = _Followed(target, source, arrived=now,
                                                cpu0=self.meter.usage_ns(target.cid))
        if target.qos_error is not None:
            self.metrics.qos_errors.inc()
            log.warning("%s: quality annotations ignored: %s", target.name, target.qos_error)
        elif target.qos is not None:
            job.qos = JobQos(target.qos,
                             target.created if target.created is not None else self.clock(),
                             window_s=self.config.qos_window_s)
            deadline = job.qos.deadline
            log.info("%s: target loss %s, deadline %s", target.name,
                     _fmt(target.qos.target_loss), "-" if deadline is None else
                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline)))
        self.control.arrive(target.cid, now, self.meter.usage_ns(target.cid))
        self.metrics.events.labels("arrival").inc()
        log.info("job %s (%s) arrived; following %s", target.name, target.cid[:12],
                 source.path if source else "nothing")
        self._poll_one(target.cid, history=True)
        job.step0 = job.step
        self._divide(now)
        self.apply(now)

    def depart(self, cid: str, now: float, why: str) -> None:
        job = self.jobs.pop(cid, None)
        if job is None:
            return
        if job.source is not None:
            job.source.close()
        self.control.depart(cid, now)
        self.proofs.hasher.forget(cid)
        self.actuator.forget(cid)  # its limit goes with it
        self.meter.forget(cid)
        self.metrics.forget_job(self._label(job.target))
        self.metrics.events.labels("departure").inc()
        log.info("job %s (%s) %s; its limit is released", job.target.name, cid[:12], why)
        self._divide(now)
        self.apply(now)

    # -- reading progress ---------------------------------------------------------------------
    def _poll_one(self, cid: str, history: bool = False) -> None:
        job = self.jobs[cid]
        if job.source is None:
            return
        reading = job.source.poll()
        for k in reading.steps:
            job.step = job.step + 1 if k is None else max(job.step, float(k))
        if job.step1 is None and job.step > job.step0:
            job.step1, job.cpu1 = job.step, self.meter.usage_ns(cid)
        if job.qos is not None:
            job.qos.add(self.clock(), reading.steps, reading.losses)
        if reading.parse_errors:
            self.metrics.parse_errors.inc(reading.parse_errors)
        if reading.regex_dropped:
            self.metrics.user_regex_disabled.inc()
            log.warning("%s: its loss-regex spent its time budget in %d polls: dropped, the "
                        "built-in parsers read its lines", job.target.name, job.source.strikes)
        st = job.source.stats
        seen = job.stats_seen
        if st.rotations > seen[0]:
            self.metrics.log_rotations.labels("rotation").inc(st.rotations - seen[0])
        if st.truncations > seen[1]:
            self.metrics.log_rotations.labels("truncation").inc(st.truncations - seen[1])
        if st.bytes_read > seen[2]:
            self.metrics.log_bytes.inc(st.bytes_read - seen[2])
        job.stats_seen = (st.rotations, st.truncations, st.bytes_read)
        if st.refused and not job.refusal_seen:
            # Once per job: the open is refused again every poll while the path stays bad.
            job.refusal_seen = True
            self.metrics.confinement_refusals.labels("progress").inc()
            log.warning("%s: %s refused: outside %s, through a symlink, or not a regular file",
                        job.target.name, job.source.path, job.target.file_root)
        if history:
            self.control.prime(cid, reading.losses)
        else:
            self.control.add_losses(cid, reading.losses)

    def poll(self) -> None:
        for cid in list(self.jobs):
            self._poll_one(cid)

    # -- the policy's node share rule -------------------------------------------------------------
    def _divide(self, now: float, first_steps_only: bool = False) -> None:
        """Run the policy's node share rule (specon.core.node.NODE_SHARES) over the jobs, from
        what each one's progress tells (specon.core.progress.measured_load). With
        ``first_steps_only``, only when some job's cost per step became measurable since the
        last run (until then it is served first, as FlowCon serves a new job). A job's cost
        per step is its CPU over its steps since the first step it reported (its start-up
        excluded: counted from arrival, a job seconds old looked many times longer than it
        is, and the order flipped as the estimate settled)."""
        if self.policy.share not in NODE_SHARES or not self.jobs:
            return
        if first_steps_only and not any(_measured(j) and (j.load is None or j.load.work == 0)
                                        for j in self.jobs.values()):
            return
        cpus = self.actuator.node_cpus
        equal = cpus / len(self.jobs)
        loads = []
        for cid, job in self.jobs.items():
            if job.fair_mark is not None:
                job.fair_cpu_s += (now - job.fair_mark) * min(equal, job.cap or cpus)
            job.fair_mark = now if _measured(job) else None
            view = self.control.jobs.get(cid)
            used = self.meter.usage_ns(cid)
            cpu_s, steps = 0.0, 0.0
            if _measured(job) and used is not None and job.cpu1 is not None:
                assert job.step1 is not None
                cpu_s, steps = (used - job.cpu1) / 1e9, job.step - job.step1
            self._measure_demand(cid, job, now, used, cpus)
            job.load = measured_load(cid, job.step, job.target.total_steps, cpu_s, cpus,
                                     view.cat.category if view else Category.PROGRESSING,
                                     job.fair_cpu_s, measured_steps=steps, cap=job.cap)
            loads.append(job.load)
        self.control.divide(self.policy.share, cpus, loads, self.weights)

    def _measure_demand(self, cid: str, job: _Followed, now: float, used: int | None,
                        cpus: float) -> None:
        """What the job showed it can use since its limit last changed (or since the last
        measurement), over DEMAND_MIN_WINDOW_S at least, and how long it waited for a CPU
        meanwhile: its cap for the share rule (demand_cap)."""
        if used is None:
            return
        mark, waited = job.demand_mark, self.meter.wait_ns(cid)
        if mark is None or used < mark[1]:
            job.demand_mark = (now, used, waited)
            return
        if now - mark[0] < DEMAND_MIN_WINDOW_S:
            return
        try:
            limit = self.actuator.read(cid).cores
        except ActuatorError:
            return
        window = now - mark[0]
        share = (None if waited is None or mark[2] is None or waited < mark[2]
                 else (waited - mark[2]) / 1e9 / window)
        job.cap = demand_cap((used - mark[1]) / 1e9 / window, limit, cpus, share)
        job.demand_mark = (now, used, waited)

    # -- limits -------------------------------------------------------------------------------
    def apply(self, now: float | None = None) -> None:
        """Write the limits the node controller decided (decreases first); drop jobs whose
        container is gone. A failed write is tried again one poll interval later, not at every
        pass."""
        now = self.monotonic() if now is None else now
        if not self.control.dirty or now < self._retry_at:
            return
        self.control.dirty = False
        limits = {cid: f for cid, f in self.control.limits.items() if cid in self.jobs}
        if not limits:
            return
        changes, failed = self.actuator.apply_many(limits, floor=self.control.floor)
        for ch in changes:
            before = ch.before.cores if ch.before.cores is not None else math.inf
            after = ch.after.cores if ch.after.cores is not None else math.inf
            self.metrics.limit_writes.labels("down" if after < before else "up").inc()
            self._hint_threads(ch.container_id, ch.after.cores)
            changed = self.jobs.get(ch.container_id)
            if changed is not None:  # its use is measured under the new limit from now
                used = self.meter.usage_ns(ch.container_id)
                changed.demand_mark = (None if used is None
                                       else (now, used, self.meter.wait_ns(ch.container_id)))
            self._tell(ch)
        gone = []
        for cid, exc in failed.items():
            self.metrics.limit_failures.labels(exc.reason).inc()
            if isinstance(exc, ContainerGone):
                gone.append(cid)
            else:
                # Keep the job and its decision: the write is tried again at the next change.
                log.warning("limit of %s not set: %s", cid[:12], exc)
                self.control.dirty = True
                self._retry_at = now + self.config.poll_s
        for cid in gone:
            self.depart(cid, now, "vanished (container or cgroup gone)")

    def _tell(self, ch: LimitChange, restored: bool = False) -> None:
        """Offer the change to the Events poster (never waits)."""
        job = self.jobs.get(ch.container_id)
        if self.limit_events is None or job is None or not job.target.uid:
            return
        view = self.control.jobs.get(ch.container_id)
        t = job.target
        self.limit_events.offer(LimitNote(
            t.namespace, t.pod, t.uid, t.container, ch.before.cores, ch.after.cores,
            restored=restored, category=view.cat.category.value if view else None,
            why="the agent is stopping" if restored else
            limit_source(self.control, ch.container_id, self.policy.share)))

    def _hint_threads(self, cid: str, cores: float | None) -> None:
        """Tell the job how many threads its new limit is worth (training contract §6)."""
        job = self.jobs.get(cid)
        if job is None or job.target.checkpoint_dir is None:
            return
        if threads_for_limit(cores, self.actuator.node_cpus) == job.threads_hint:
            return
        written = write_thread_hint(job.target.checkpoint_dir, cores, self.actuator.node_cpus,
                                    job.target.name, opener=lambda: checkpoint_dirfd(job.target))
        if written is not None:
            job.threads_hint = written

    def _hint_restored(self, failed: Mapping[str, ActuatorError]) -> None:
        """The limits went back to what they were: so do the thread hints written for them."""
        for cid, job in self.jobs.items():
            if job.threads_hint is None or cid in failed:
                continue
            try:
                cores = self.actuator.read(cid).cores
            except ActuatorError:
                continue  # gone: nobody to tell
            self._hint_threads(cid, cores)

    # -- intervals ----------------------------------------------------------------------------
    def _cpu(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for cid in self.jobs:
            out[cid] = self.meter.usage_ns(cid)
            if out[cid] is None:
                self.metrics.cpu_unknown.inc()
        return out

    def step(self, now: float | None = None) -> None:
        """One pass: manager replies, logs, FlowCon and categorisation when due, limits,
        heartbeat, metrics. ``now``: on the monotonic clock."""
        now = self.monotonic() if now is None else now
        self._drain_inbox()
        polled = now >= self.next_poll
        if polled:
            with self.metrics.loop_seconds.labels("poll").time():
                self.poll()
            self.next_poll = now + self.config.poll_s
        before = self._states()
        if polled:
            self._divide(now, first_steps_only=True)
        if self.policy.flowcon and now >= self.control.flow_due:
            with self.metrics.loop_seconds.labels("flowcon").time():
                self.control.flow_tick(now, self._cpu())
                self.apply(now)
        if now >= self.next_cat:
            with self.metrics.loop_seconds.labels("categorize").time():
                self._categorize(now)
                self._divide(now)
            self.next_cat = now + self.interval_s
        if now >= self.next_qos:
            with self.metrics.loop_seconds.labels("qos").time():
                self._qos_tick(self.clock())  # deadlines are wall-clock times
            self.next_qos = now + self.config.qos_interval_s
        self._log_transitions(before)
        self.apply(now)
        if polled:
            self._publish(now)

    def _states(self) -> dict[str, tuple[str, str]]:
        return {cid: (str(self.control.flow_list(cid)), str(v.cat.category))
                for cid, v in self.control.jobs.items()}

    def _log_transitions(self, before: dict[str, tuple[str, str]]) -> None:
        for cid, now_state in self._states().items():
            was = before.get(cid)
            if was is not None and was != now_state:
                view = self.control.jobs[cid]
                g = view.growth.progress if view.growth is not None else None
                log.info("%s: FlowCon %s -> %s, category %s -> %s (growth %s, efficiency %s, "
                         "limit %.3f)", self.jobs[cid].target.name, was[0], now_state[0], was[1],
                         now_state[1], _fmt(g), _fmt(view.efficiency),
                         self.control.limits.get(cid, 1.0))

    def _categorize(self, now: float) -> None:
        requests = self.control.categorize_tick(now, self._cpu())
        for cid in requests:
            job = self.jobs.get(cid)
            if job is None:
                continue
            if not self.policy.asks_to_move:
                continue  # the manager plans this policy's moves itself
            self.metrics.reallocation_requests.inc()
            if self.link is not None:
                self.link.request_reallocation(ReallocationRequest(
                    node=self.config.node, namespace=job.target.namespace, pod=job.target.pod,
                    uid=job.target.uid, time=self.clock()))
            elif not job.asked:
                log.info("%s has converged on a crowded node; no manager to move it (standalone)",
                         job.target.name)
            job.asked = True

    def _qos_tick(self, now: float) -> None:
        """Judge every job with a target or deadline; their limits override FlowCon's."""
        cpus = self.actuator.node_cpus
        judged: dict[str, Assessment | None] = {}
        for cid, job in self.jobs.items():
            q = job.qos
            if q is None:
                judged[cid] = None
                continue
            before = q.assessment.state if q.assessment is not None else None
            q.sample(now, self.meter.usage_ns(cid))
            a = q.judge(now, best_cores=q.best_cores(cpus))
            judged[cid] = a
            if a.state != before:
                log.info("%s: %s -> %s (predicted %s s, slack %s s, needs %s cores)",
                         job.target.name, before or "new", a.state, _fmt(a.predicted_s),
                         _fmt(a.slack_s), _fmt(a.need_cores))
            if q.reached_at is not None and q.spec.stop_at_target and not q.stop_asked:
                self._stop_at_target(job)
        was = self.control.first
        _, changed = self.control.judge_qos(judged, cpus, self.config.qos_floor_cores)
        if changed:
            # The limits follow each job's need at every tick: say so at info level only when
            # the set of jobs given the node changes.
            log.log(logging.INFO if self.control.first != was else logging.DEBUG,
                    "QoS limits (cores): %s", ", ".join(
                        f"{self.jobs[c].target.name}={v * cpus:.2f}"
                        for c, v in self.control.qos_limits.items())
                    or "none (FlowCon decides)")

    def _stop_at_target(self, job: _Followed) -> None:
        assert job.qos is not None
        job.qos.stop_asked = True
        if job.target.checkpoint_dir is None:
            log.warning("%s reached its target; it asked to stop there but has no checkpoint "
                        "directory, so it runs on", job.target.name)
            return
        log.info("%s reached its target loss %s: asking it to save and stop", job.target.name,
                 job.qos.spec.target_loss)
        self._write_request(job, f"target-{job.target.cid[:12]}", exit=True, done=True)

    def next_due(self) -> float:
        flow = self.control.flow_due if self.policy.flowcon else math.inf
        return min(self.next_poll, flow, self.next_cat, self.next_qos)

    # -- the manager --------------------------------------------------------------------------
    def _drain_inbox(self) -> None:
        while True:
            try:
                item = self._inbox.items.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, HeartbeatReply):
                self._on_reply(item)
            else:
                req, reply = item
                self._on_reallocation(req, reply)

    def _on_reply(self, reply: HeartbeatReply) -> None:
        p = reply.parameters
        if self.control.set_parameters(p.alpha, p.flowcon_alpha, p.flowcon_beta):
            log.info("parameters from the manager: alpha=%s flowcon alpha=%s beta=%s",
                     p.alpha, p.flowcon_alpha, p.flowcon_beta)
        if p.interval_s != self.interval_s:
            self.next_cat += p.interval_s - self.interval_s
            self.interval_s = p.interval_s
        for creq in reply.checkpoint_requests:
            self._ask_checkpoint(creq)

    def _ask_checkpoint(self, creq: CheckpointRequest) -> None:
        job = next((j for j in self.jobs.values()
                    if (j.target.namespace, j.target.pod) == (creq.namespace, creq.pod)), None)
        if job is not None:
            self._write_request(job, creq.id, exit=creq.exit)

    def _write_request(self, job: _Followed, rid: str, exit: bool, done: bool = False) -> None:
        """Write the job's request file (docs/training-contract.md §4), atomically."""
        if job.target.checkpoint_dir is None:
            return
        path = job.target.checkpoint_dir / "request.json"
        body: dict[str, Any] = {"id": rid, "exit": exit}
        if done:
            body["done"] = True
        try:
            dfd = checkpoint_dirfd(job.target)
            try:
                try:
                    if json.loads(read_beneath(dfd, "request.json", SMALL_FILE)).get("id") == rid:
                        return
                except FileNotFoundError:
                    pass
                write_beneath(dfd, "request.json", json.dumps(body).encode())
            finally:
                os.close(dfd)
            log.info("asked %s for checkpoint %s", job.target.name, rid)
        except ConfinementError as exc:
            self.metrics.confinement_refusals.labels("checkpoint").inc()
            log.warning("%s: request not written, %s refused: %s", job.target.name, path, exc)
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("cannot write %s: %s", path, exc)

    def _on_reallocation(self, req: ReallocationRequest, reply: ReallocationReply) -> None:
        if not reply.migrated:
            return
        for cid, job in self.jobs.items():
            if (job.target.namespace, job.target.pod) == (req.namespace, req.pod):
                self.control.mark_migrated(cid)

    def checkpoint_of(self, job: _Followed) -> SavedCheckpoint | None:
        """The job's last checkpoint once it verifies (specon_agent.checkpoints)."""
        cid = job.target.cid
        return self.proofs.report(cid, job.target, job.proof)

    def heartbeat(self, now: float) -> Heartbeat:
        """The node's report (``now``: wall clock; the link stamps it again when it sends)."""
        self.seq += 1
        self.proofs.hasher.new_pass()  # the checkpoints' hashes wait this long at most
        reports = []
        for cid, job in list(self.jobs.items())[:1000]:
            view = self.control.jobs.get(cid)
            if view is None:
                continue
            t = job.target
            g = view.growth
            reports.append(self._qos_report(job, now, JobReport(
                namespace=t.namespace, pod=t.pod, container=t.container, uid=t.uid,
                category=view.cat.category,
                growth=g.progress if g is not None else None,
                efficiency=view.efficiency, loss=view.loss,
                limit=min(1.0, self.control.limits.get(cid, 1.0)), cpu_cores=view.cores,
                owner_limit_cores=self.actuator.owner_cores(cid),
                migrated=view.cat.migrated, checkpointable=t.migratable,
                step=int(job.step) if job.step > 0 else None,
                work_s=job.load.work if job.load is not None and _measured(job) else None,
                work_done_s=(job.load.attained if job.load is not None and _measured(job)
                             else None),
                demand_cores=job.cap,
                checkpoint=self.checkpoint_of(job))))
        return Heartbeat(
            node=self.config.node, time=now, seq=self.seq, capacity_cpus=self.actuator.node_cpus,
            load_cores=sum(r.cpu_cores for r in reports), jobs=reports,
            actuator=self.actuator.name, boot=self.boot)

    @staticmethod
    def _qos_report(job: _Followed, now: float, report: JobReport) -> JobReport:
        q = job.qos
        if q is None:
            return report
        a = q.assessment
        est, low, high = q.target_s()
        slack = a.slack_s if a is not None else None
        return report.model_copy(update={
            "target_loss": q.spec.target_loss, "deadline": q.deadline,
            "target_reached": q.reached_at is not None,
            "qos": a.state if a is not None else "on-track",
            "predicted_finish_s": q.finish_s(), "predicted_target_s": est,
            "predicted_target_low_s": low, "predicted_target_high_s": high,
            "slack_s": slack if slack is not None and math.isfinite(slack) else None,
        })

    def _publish_qos(self, label: JobKey, q: JobQos) -> None:
        m = self.metrics
        a = q.assessment
        for state in QOS_STATES:
            m.job_qos.labels(*label, state).set(int(a is not None and a.state == state))
        finish = q.finish_s()
        if finish is not None:
            m.job_predicted_finish.labels(*label).set(finish)
        for bound, v in zip(BOUNDS, q.target_s(), strict=True):
            if v is not None:
                m.job_predicted_target.labels(*label, bound).set(v)
        if a is not None and a.slack_s is not None and math.isfinite(a.slack_s):
            m.job_slack.labels(*label).set(a.slack_s)

    def _label(self, t: Target) -> JobKey:
        return (t.namespace, t.pod, t.container)

    def _publish(self, now: float) -> None:
        m = self.metrics
        for cat, n in self.control.counts().items():
            m.jobs.labels(cat.value).set(n)
        for cid, job in self.jobs.items():
            view = self.control.jobs.get(cid)
            if view is None:
                continue
            label = self._label(job.target)
            for cat in Category:
                m.job_category.labels(*label, cat.value).set(int(view.cat.category is cat))
            current = self.control.flow_list(cid)
            for lst in FlowList:
                m.job_flowcon.labels(*label, lst.value).set(int(current is lst))
            if view.loss is not None:
                m.job_loss.labels(*label).set(view.loss)
            if view.growth is not None:
                m.job_growth.labels(*label).set(view.growth.progress)
            if view.efficiency is not None:
                m.job_efficiency.labels(*label).set(view.efficiency)
            m.job_limit.labels(*label).set(
                min(1.0, self.control.limits.get(cid, 1.0)) * self.actuator.node_cpus)
            m.job_cpu.labels(*label).set(view.cores)
            if job.qos is not None:
                self._publish_qos(label, job.qos)
        if self.link is not None:
            self.link.offer_heartbeat(self.heartbeat(self.clock()))

    # -- running ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """The loop, until ``stop`` is set. Events are handled as they come (the listener runs
        at once); everything else when due."""
        while not stop.is_set():
            timeout = max(0.0, min(self.next_due() - self.monotonic(), 0.5))
            try:
                event = self.events.get(timeout=timeout)
            except queue.Empty:
                pass
            else:
                self._guarded(self.handle, event)
                while True:
                    try:
                        more = self.events.get_nowait()
                    except queue.Empty:
                        break
                    self._guarded(self.handle, more)
            self._guarded(self.step)
            self.watchdog.beat()  # a pass completed (/healthz)
            self.metrics.loop_last_pass.set_to_current_time()

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        # The loop must outlive any one failure: log it with its traceback and go on.
        try:
            fn(*args)
        except ActuatorError as exc:
            self.metrics.limit_failures.labels(exc.reason).inc()
            log.warning("actuator: %s", exc)
        except Exception:
            log.exception("control loop pass failed; continuing")

    def close(self) -> None:
        # The limits first: the one thing that must happen before the grace period ends.
        try:
            if self.config.restore_on_exit:
                failed = self.actuator.restore_all(
                    on_change=lambda ch: self._tell(ch, restored=True))
                self.metrics.restore_failures.inc(len(failed))
                for cid, exc in failed.items():
                    log.warning("could not restore the limit of %s: %s", cid[:12], exc)
                self._hint_restored(failed)
                log.info("restored the limits this agent changed (%d failed)", len(failed))
        finally:
            self.proofs.hasher.close()
            for job in self.jobs.values():
                if job.source is not None:
                    job.source.close()

"""The agent's control loop: discovery events in, logs read, FlowCon and Algorithm 3 run, limits
written, heartbeats and reallocation requests handed to the manager link.

One thread owns all state (:meth:`Agent.run`); discovery and the manager link only put events
into its queues. :meth:`Agent.step` is one pass of the loop at a given time, so tests can drive
the agent deterministically against real containers.

The loop's parts, by role: what it runs under (:mod:`~specon_agent.loop_config`), what it knows
of each job (:mod:`~specon_agent.followed`), the policy's node share step
(:mod:`~specon_agent.share_step`) and the quality step (:mod:`~specon_agent.qos_step`), what it
tells (:mod:`~specon_agent.reporting`: heartbeat, metrics, Events) and the checkpoint requests
it writes (:mod:`~specon_agent.checkpoint_requests`).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specon import rfc3339
from specon.core.node import NodeController, qos_limits_over
from specon.core.scoring import Weights
from specon.wire import (
    CheckpointRequest,
    Heartbeat,
    HeartbeatReply,
    ReallocationReply,
    ReallocationRequest,
    SavedCheckpoint,
)

from .actuators import Actuator, ActuatorError, ContainerGone, LimitChange
from .checkpoint_requests import write_request
from .checkpoints import CheckpointProofs
from .cpu import CpuMeter
from .discovery import Arrived, Departed, Ending, Event, Resync, Target
from .eta import StepRate
from .events import LimitEvents
from .followed import FollowedJob
from .health import LoopWatchdog, stall_bound
from .link import ManagerLink
from .loop_config import LoopConfig, agent_policy
from .metrics import AgentMetrics
from .progress import ProgressSource
from .qos_step import judge_qos
from .qos_tracker import JobQos
from .reporting import count_reading, job_key, job_report, limit_note, publish_metrics
from .reporting import fmt as _fmt
from .share_step import divide
from .speed_probe import SpeedProbe
from .tenancy import count_refusals
from .threads import hint_threads, hints_restored

log = logging.getLogger(__name__)


@dataclass
class _Inbox:
    """What the manager link's thread hands to the loop."""

    items: queue.Queue[Any] = field(default_factory=queue.Queue)


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
        #: The node's per-core speed, reported in every heartbeat (specon_agent.speed_probe).
        self.speed_probe = SpeedProbe()
        self.cpu_speed: float | None = None
        # CPU counters are in nanoseconds (cgroup cpu.stat, Docker's stats).
        self.control = NodeController(config.flow_params(), config.alpha, per_second=1e9)
        self.policy = agent_policy(config.policy)
        self.weights = Weights()
        self.interval_s = config.interval_s
        self.jobs: dict[str, FollowedJob] = {}
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
        elif isinstance(event, Ending):
            self.ending(event.cid)
        elif isinstance(event, Resync):
            wanted = {t.cid: t for t in event.targets}
            for cid in list(self.jobs.keys() - wanted.keys()):
                self.depart(cid, now, "gone (resync)")
            for cid in wanted.keys() - self.jobs.keys():
                self.arrive(wanted[cid], now)
            for cid, t in wanted.items():
                if t.ending:
                    self.ending(cid)

    def ending(self, cid: str) -> None:
        """The job's pod is being deleted: still followed, reported as ending."""
        job = self.jobs.get(cid)
        if job is not None and not job.ending:
            job.ending = True
            log.info("%s: its pod is being deleted; followed until it ends", job.target.name)

    def _source(self, t: Target) -> ProgressSource | None:
        # One source per job: the SDK writes every record to its file and to stdout alike.
        if t.progress_path is not None and t.progress_path.parent.is_dir():
            return ProgressSource(t.progress_path, "plain", self.config.tail_bytes, t.loss_regex,
                                  root=t.file_root)
        if t.metrics_csv is not None:
            # Named by the pod: followed even before the logger creates it (at its first flush).
            return ProgressSource(t.metrics_csv, "csv", root=t.file_root)
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
        self.jobs[target.cid] = job = FollowedJob(target, source, arrived=now, ending=target.ending,
                                                  cpu0=self.meter.usage_ns(target.cid),
                                                  rate=StepRate(self.config.qos_window_s))
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
                     rfc3339.seconds(deadline))
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
        self.metrics.forget_job(job_key(job.target))
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
        job.rate.add(self.clock(), job.step, counted=None in reading.steps)
        if job.qos is not None:
            job.qos.add(self.clock(), reading.steps, reading.losses)
        count_reading(self.metrics, job, job.source, reading)
        if history:
            self.control.prime(cid, reading.losses)
        else:
            self.control.add_losses(cid, reading.losses)

    def poll(self) -> None:
        for cid in list(self.jobs):
            self._poll_one(cid)

    # -- the policy's node share rule -------------------------------------------------------------
    def _divide(self, now: float, first_steps_only: bool = False) -> None:
        """The policy's node share step (specon_agent.share_step)."""
        divide(self.jobs, self.control, self.policy.share, self.weights, self.meter,
               self.actuator, now, first_steps_only)

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
            writes = self.metrics.would_limit_writes if self.actuator.observing \
                else self.metrics.limit_writes
            writes.labels("down" if after < before else "up").inc()
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
        self.limit_events.offer(
            limit_note(job.target, ch, self.control, self.policy.share, restored,
                       observed=self.actuator.observing))

    def _hint_threads(self, cid: str, cores: float | None) -> None:
        """Tell the job how many threads its new limit is worth (training contract §6)."""
        job = self.jobs.get(cid)
        if job is not None:
            hint_threads(job, cores, self.actuator)

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
        requests = self.control.categorize_tick(now, self._cpu(),
                                                limits_applied=not self.actuator.observing)
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
        """The quality step (specon_agent.qos_step); ``now``: wall clock."""
        judge_qos(self.jobs, self.control, self.meter, self.metrics, self.actuator.node_cpus,
                  self.config.qos_floor_cores, now,
                  qos_limits_over(self.policy.share, self.config.qos_over_shares))

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
            write_request(job.target, creq.id, creq.exit, self.metrics)

    def _on_reallocation(self, req: ReallocationRequest, reply: ReallocationReply) -> None:
        if not reply.migrated:
            return
        for cid, job in self.jobs.items():
            if (job.target.namespace, job.target.pod) == (req.namespace, req.pod):
                self.control.mark_migrated(cid)

    def checkpoint_of(self, job: FollowedJob) -> SavedCheckpoint | None:
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
            reports.append(job_report(
                job, view, now, limit=min(1.0, self.control.limits.get(cid, 1.0)),
                owner_limit_cores=self.actuator.owner_cores(cid),
                checkpoint=self.checkpoint_of(job)))
        return Heartbeat(
            node=self.config.node, time=now, seq=self.seq, capacity_cpus=self.actuator.node_cpus,
            load_cores=sum(r.cpu_cores for r in reports), jobs=reports,
            actuator=self.actuator.name, boot=self.boot, cpu_speed=self.cpu_speed)

    def _publish(self, now: float) -> None:
        publish_metrics(self.metrics, self.control, self.jobs, self.actuator.node_cpus,
                        self.clock(), observing=self.actuator.observing)
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
                hints_restored(self.jobs, self.actuator, failed)
                log.info("restored the limits this agent changed (%d failed)", len(failed))
        finally:
            self.proofs.hasher.close()
            for job in self.jobs.values():
                if job.source is not None:
                    job.source.close()

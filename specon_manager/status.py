"""The manager's status page (``GET /status``): what the Grafana dashboards show, from the
manager's own live view, for clusters without Grafana. Plain HTML and inline SVG, no script.
``GET /status/jobs``: its jobs as JSON, for ``kubectl specon`` (through the API server's
service proxy)."""

from __future__ import annotations

import html
import math
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CollectorRegistry

from specon.core.categorize import Category
from specon.wire import JobReport
from specon_manager.state import ClusterState

router = APIRouter()

_COLOURS = {Category.PROGRESSING: "#2f7ed8", Category.WATCHING: "#f2a900",
            Category.CONVERGED: "#6aa84f"}
_NAMES = {Category.PROGRESSING: "progressing", Category.WATCHING: "watching",
          Category.CONVERGED: "converged"}


def _samples(registry: CollectorRegistry, family: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for metric in registry.collect():
        if metric.name == family:
            out += [(s.name, dict(s.labels), s.value) for s in metric.samples]
    return out


def _sum(registry: CollectorRegistry, family: str, sample: str, **labels: str) -> float:
    return sum(v for name, lab, v in _samples(registry, family)
               if name == sample and all(lab.get(k) == x for k, x in labels.items()))


def _quantile(registry: CollectorRegistry, family: str, q: float, **labels: str) -> float | None:
    """The q-quantile of a histogram (the upper bound of the bucket it falls in)."""
    buckets: dict[float, float] = {}
    for name, lab, v in _samples(registry, family):
        if name == family + "_bucket" and all(lab.get(k) == x for k, x in labels.items()):
            le = float(lab["le"])
            buckets[le] = buckets.get(le, 0.0) + v
    if not buckets or buckets.get(math.inf, 0.0) == 0:
        return None
    total = buckets[math.inf]
    for le in sorted(buckets):
        if buckets[le] >= q * total:
            return le
    return None


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "–"
    if math.isinf(v):
        return "> top bucket"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.0f} s"


def _fmt(v: float | None, spec: str = ".3g") -> str:
    return "–" if v is None else format(v, spec)


def _dur(v: float | None) -> str:
    """Seconds as a short duration (negative: late), "–" when unknown."""
    if v is None:
        return "–"
    sign, v = ("-" if v < 0 else ""), abs(v)
    if v < 120:
        return f"{sign}{v:.0f} s"
    if v < 7200:
        return f"{sign}{v / 60:.0f} min"
    return f"{sign}{v / 3600:.1f} h"


_QOS_CLASS = {"at-risk": "bad", "given-up": "bad", "on-track": "ok", "reached": "ok"}


def _qos_cells(j: JobReport) -> str:
    """QoS state, predicted finish, predicted target time (with its band) and slack."""
    target = _dur(j.predicted_target_s)
    if j.predicted_target_s is not None and (
            j.predicted_target_low_s is not None and j.predicted_target_high_s is not None):
        target += f" ({_dur(j.predicted_target_low_s)}–{_dur(j.predicted_target_high_s)})"
    cls = _QOS_CLASS.get(j.qos)
    return (f"<td{f' class={cls}' if cls else ''}>{html.escape(j.qos)}</td>"
            f"<td>{_dur(j.predicted_finish_s)}</td><td>{target}</td>"
            f"<td>{_dur(j.slack_s)}</td>")


def _bars(rows: list[tuple[str, dict[Category, int], bool]]) -> str:
    """One stacked horizontal bar per worker: its jobs by category."""
    width, row_h, label_w = 640, 26, 150
    top = max([sum(c.values()) for _, c, _ in rows] + [1])
    unit = (width - label_w - 40) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{row_h * len(rows) + 8}" role="img" aria-label="jobs per worker">']
    for i, (node, counts, fresh) in enumerate(rows):
        y = 4 + i * row_h
        parts.append(f'<text x="0" y="{y + 16}" class="lbl">{html.escape(node)}'
                     f'{"" if fresh else " (stale)"}</text>')
        x = float(label_w)
        for cat in Category:
            n = counts.get(cat, 0)
            if n:
                w = n * unit
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 6}" '
                             f'fill="{_COLOURS[cat]}" opacity="{1 if fresh else 0.35}">'
                             f'<title>{n} {_NAMES[cat]}</title></rect>')
                if w > 14:
                    parts.append(f'<text x="{x + w / 2:.1f}" y="{y + 15}" class="in">{n}</text>')
                x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 16}" class="lbl">{sum(counts.values())}'
                     '</text>')
    parts.append("</svg>")
    return "".join(parts)


def _speed(state: ClusterState, node: str) -> str:
    """The node's per-core speed as the placement takes it, and where it comes from."""
    label = state.node_speed(node)
    if label is not None:
        return f"{label:.3g} (label)"
    known = state.known_speed(node)
    return "– (1 taken)" if known is None else f"{known:.3g} (measured)"


def render(state: ClusterState, registry: CollectorRegistry, now: float | None = None) -> str:
    """The page, from the live state and the manager's metrics."""
    now = time.time() if now is None else now
    rows: list[tuple[str, dict[Category, int], bool]] = []
    worker_rows = []
    for node in state.nodes():
        hb = state.heartbeat(node)
        if hb is None:
            continue
        fresh = state.is_fresh(node)
        counts = {cat: sum(1 for j in hb.jobs if j.category is cat) for cat in Category}
        rows.append((node, counts, fresh))
        limits = sum(j.limit for j in hb.jobs)
        worker_rows.append(
            f"<tr><td>{html.escape(node)}</td><td class={'ok' if fresh else 'bad'}>"
            f"{'fresh' if fresh else 'stale'}</td><td>{now - hb.time:.0f} s</td>"
            f"<td>{hb.capacity_cpus:g}</td><td>{_speed(state, node)}</td>"
            f"<td>{hb.load_cores:.2f}</td>"
            f"<td>{limits * hb.capacity_cpus:.2f}</td>"
            + "".join(f"<td>{counts[c]}</td>" for c in Category)
            + f"<td>{html.escape(hb.actuator or '–')}</td></tr>")
    job_rows = []
    for node, j in sorted(state.jobs(fresh_only=False), key=lambda t: (t[0], t[1].pod)):
        hb = state.heartbeat(node)
        cpus = hb.capacity_cpus if hb is not None else 1.0
        job_rows.append(
            f"<tr><td>{html.escape(j.namespace)}/{html.escape(j.pod)}</td>"
            f"<td>{html.escape(node)}</td>"
            f'<td><span class="dot" style="background:{_COLOURS[j.category]}"></span>'
            f"{_NAMES[j.category]}</td><td>{_fmt(j.loss, '.4g')}</td>"
            f"<td>{_fmt(j.growth, '.3g')}</td><td>{j.limit * cpus:.2f}</td>"
            f"<td>{j.cpu_cores:.2f}</td><td>{'yes' if j.migrated else 'no'}</td>"
            f"<td>{'yes' if j.checkpointable else 'no'}</td>{_qos_cells(j)}</tr>")
    at_risk = sum(1 for _, j in state.jobs() if j.qos == "at-risk")
    m = registry
    p = "specon_manager_"
    migr = {r: _sum(m, f"{p}migrations", f"{p}migrations_total", result=r)
            for r in ("completed", "stayed", "cancelled", "failed")}
    in_flight = _sum(m, f"{p}migrations_in_flight", f"{p}migrations_in_flight")
    lat = f"{p}extender_request_duration_seconds"
    ext = "".join(
        f"<tr><td>{verb}</td><td>"
        f"{_sum(m, f'{p}extender_requests', f'{p}extender_requests_total', verb=verb):.0f}"
        f"</td><td>{_fmt_s(_quantile(m, lat, 0.5, verb=verb))}"
        f"</td><td>{_fmt_s(_quantile(m, lat, 0.99, verb=verb))}"
        "</td></tr>" for verb in ("filter", "prioritize"))
    heartbeats = _sum(m, f"{p}heartbeats", f"{p}heartbeats_total", result="accepted")
    legend = " ".join(f'<span class="dot" style="background:{_COLOURS[c]}"></span>{_NAMES[c]}'
                      for c in Category)
    empty = '<p class="note">No worker has reported yet.</p>'
    cat_heads = "".join(f"<th>{_NAMES[c]}</th>" for c in Category)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>SpeCon status</title>
<style>
body {{ font: 14px/1.4 "DejaVu Sans", sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }} h2 {{ font-size: 16px; margin: 22px 0 8px; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 3px 10px; border-bottom: 1px solid #ddd;
text-align: right; }} td:first-child, th:first-child {{ text-align: left; }}
th {{ background: #f3f3f3; }} .ok {{ color: #2b7a0b; }} .bad {{ color: #b00; }}
.note {{ color: #666; }} .dot {{ display: inline-block; width: 10px; height: 10px;
border-radius: 5px; margin: 0 4px 0 8px; }}
.cards {{ display: flex; gap: 12px; }} .card {{ border: 1px solid #ddd; border-radius: 6px;
padding: 8px 14px; }} .card b {{ font-size: 20px; display: block; }}
svg .lbl {{ font: 13px "DejaVu Sans", sans-serif; fill: #222; }}
svg .in {{ font: 12px "DejaVu Sans", sans-serif; fill: #fff; text-anchor: middle; }}
</style></head><body>
<h1>SpeCon status</h1>
<p class="note">The manager's live view (refreshes every 10 s). Predicted times and slack are
as of each job's last report; negative slack: late at the current rate. The same series are in
Prometheus at /metrics and in the Grafana dashboards.</p>
<div class="cards">
<div class="card"><b>{len([r for r in rows if r[2]])}/{len(rows)}</b>workers fresh</div>
<div class="card"><b>{len(job_rows)}</b>training jobs</div>
<div class="card"><b>{at_risk}</b>jobs at risk</div>
<div class="card"><b>{in_flight:.0f}</b>migrations in flight</div>
<div class="card"><b>{migr['completed']:.0f}</b>migrations completed</div>
<div class="card"><b>{heartbeats:.0f}</b>heartbeats accepted</div>
</div>
<h2>Jobs per worker by category</h2>
<p>{legend}</p>
{_bars(rows) if rows else empty}
<h2>Workers</h2>
<table><tr><th>worker</th><th>heartbeat</th><th>age</th><th>CPUs</th><th>speed</th>
<th>CPU used</th>
<th>limits set</th>{cat_heads}<th>actuator</th></tr>
{''.join(worker_rows)}</table>
<h2>Jobs</h2>
<table><tr><th>pod</th><th>worker</th><th>category</th><th>loss</th><th>progress/min</th>
<th>CPU limit</th><th>CPU used</th><th>migrated</th><th>checkpoints</th><th>QoS</th>
<th>finish in</th><th>target in</th><th>slack</th></tr>
{''.join(job_rows)}</table>
<h2>Migrations</h2>
<table><tr><th>completed</th><th>stayed</th><th>cancelled</th><th>failed</th><th>in flight</th>
<th>duration p50</th><th>checkpoint wait p50</th></tr>
<tr><td>{migr['completed']:.0f}</td><td>{migr['stayed']:.0f}</td>
<td>{migr['cancelled']:.0f}</td><td>{migr['failed']:.0f}</td><td>{in_flight:.0f}</td>
<td>{_fmt_s(_quantile(m, f'{p}migration_duration_seconds', 0.5))}</td>
<td>{_fmt_s(_quantile(m, f'{p}migration_checkpoint_wait_seconds', 0.5))}</td></tr></table>
<h2>Extender (kube-scheduler's calls)</h2>
<table><tr><th>verb</th><th>calls</th><th>p50</th><th>p99</th></tr>{ext}</table>
</body></html>
"""


@router.get("/status", response_class=HTMLResponse, tags=["operations"])
def status_page(request: Request) -> HTMLResponse:
    """The status page for people: workers, jobs, migrations, extender latency."""
    state: ClusterState = request.app.state.cluster
    registry: Any = request.app.state.metrics.registry
    return HTMLResponse(render(state, registry))


def jobs(state: ClusterState, now: float | None = None) -> dict[str, Any]:
    """Every reported job with its category, limit (cores) and predicted finish, as of its
    node's last heartbeat (``reported``, agent clock; ``time`` is the manager's now)."""
    out = []
    for node, j in sorted(state.jobs(fresh_only=False), key=lambda t: (t[1].namespace,
                                                                        t[1].pod)):
        hb = state.heartbeat(node)
        if hb is None:
            continue
        out.append({"namespace": j.namespace, "pod": j.pod, "uid": j.uid, "node": node,
                    "fresh": state.is_fresh(node), "category": j.category.value,
                    "limit_cores": j.limit * hb.capacity_cpus, "qos": j.qos,
                    "predicted_finish_s": j.predicted_finish_s, "reported": hb.time})
    return {"time": time.time() if now is None else now, "jobs": out}


@router.get("/status/jobs", tags=["operations"])
def status_jobs(request: Request) -> JSONResponse:
    """The status page's jobs as JSON (what ``kubectl specon get`` reads for its ETA)."""
    return JSONResponse(jobs(request.app.state.cluster))

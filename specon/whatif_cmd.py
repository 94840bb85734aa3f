"""``specon whatif``: ask the manager for the live jobs (``/status/whatif-input``, directly or
through the API server's service proxy as ``kubectl specon`` does), simulate their work left
under ``default`` and the shipped policy with the same seeds, and print the predicted gain.
Exit codes: 0 done, 1 the manager could not be asked, 2 bad input (a flag, or a reply that is
not what this release reads, naming the field)."""

from __future__ import annotations

import argparse
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from specon import kubectl_plugin
from specon.cli import UsageError, _finite, _progress, _seeds, app, console, err
from specon.core.policy import SHIPPED
from specon.sim.model import SimConfig
from specon.sim.progress import LineProgress
from specon.sim.runner import Matrix, run_matrix
from specon.whatif import BadReply, notes, parse, to_workload

ROUTE = "/status/whatif-input"
TIMEOUT_S = 30.0
_METRICS = (("avg_completion_s", "avg completion s"), ("makespan_s", "makespan s"),
            ("avg_time_to_90_s", "time to 90% s"))


class Unreachable(Exception):
    """The manager could not be asked: exit 1 with this message."""


def fetch(url: str | None, kubeconfig: str | None, context: str | None, namespace: str,
          service: str, cacert: Path | None) -> Any:
    """The manager's reply as JSON: from ``url`` directly, else through the API server's
    service proxy with the kubeconfig (kubectl specon's way)."""
    if url:
        ctx = ssl.create_default_context(cafile=str(cacert)) if cacert else None
        try:
            with urllib.request.urlopen(url.rstrip("/") + ROUTE, timeout=TIMEOUT_S,
                                        context=ctx) as r:
                body = r.read()
        except urllib.error.HTTPError as exc:
            hint = " (is expose_status off?)" if exc.code == 404 else ""
            raise Unreachable(f"{url}{ROUTE}: HTTP {exc.code} {exc.reason}{hint}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", None) or exc
            raise Unreachable(f"{url}{ROUTE}: cannot be reached ({why})") from None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise BadReply(f"reply: not JSON ({exc})") from None
    opts = argparse.Namespace(kubectl="kubectl", kubeconfig=kubeconfig, context=context)
    path = kubectl_plugin.proxy_path(namespace, service, ROUTE)
    try:
        return kubectl_plugin.kubectl(opts, path, raw=True)
    except kubectl_plugin.Failed as exc:
        first = str(exc).splitlines()[0] if str(exc) else "failed"
        if "not JSON" in first:
            raise BadReply(f"reply: {first}") from None
        raise Unreachable(f"the manager ({namespace}/{service}) through the API server: "
                          f"{first}") from None


def _cell(v: float) -> str:
    return "—" if v != v else f"{v:.1f}"


def summary(mx: Matrix) -> dict[str, Any]:
    """Per policy each metric's mean over the seeds; the shipped policy's gain in % (positive:
    sooner) against default, paired by seed."""
    out: dict[str, Any] = {"policies": {}, "gain_pct": {}}
    for p in mx.policies:
        out["policies"][p] = {k: mx.metric(p, k).mean for k, _ in _METRICS}
    for k, _ in _METRICS:
        out["gain_pct"][k] = -mx.vs_default(SHIPPED, k).mean
    return _finite(out)  # type: ignore[no-any-return]


def _table(s: dict[str, Any], jobs: int, seeds: int) -> Table:
    t = Table(title=f"what if: {jobs} live job(s), work left from now, mean over {seeds} "
              "seed(s)", title_justify="left")
    t.add_column("policy")
    for _, head in _METRICS:
        t.add_column(head, justify="right")
    for p, vals in s["policies"].items():
        t.add_row(p, *(_cell(float("nan") if vals[k] is None else vals[k]) for k, _ in _METRICS))
    t.add_row("predicted gain", *("—" if s["gain_pct"][k] is None else f"{s['gain_pct'][k]:+.1f}%"
                                  for k, _ in _METRICS))
    return t


@app.command()
def whatif(
    manager_url: Annotated[str | None, typer.Option(
        help="The manager's base URL (e.g. through kubectl port-forward); without it the "
        "manager is asked through the API server's service proxy.")] = None,
    cacert: Annotated[Path | None, typer.Option(
        help="CA bundle that signed the manager's certificate (with an https --manager-url)."
    )] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="The kubeconfig (default: kubectl's).")
                          ] = None,
    context: Annotated[str | None, typer.Option(help="The kubeconfig context.")] = None,
    namespace: Annotated[str, typer.Option(help="The manager's namespace.")] = "specon-system",
    service: Annotated[str, typer.Option(
        help="The manager's Service, [SCHEME:]NAME[:PORT].")] = "https:specon-manager:https",
    seeds: Annotated[str, typer.Option(help="A count (3 = seeds 0-2) or a list (1,2,7).")
                     ] = "3",
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Predict what the shipped policy would gain over the default scheduler for the jobs
    running on this cluster now (simulated from the manager's live view)."""
    seed_list = _seeds(seeds)
    if not namespace or not service:
        raise UsageError("--namespace and --service must not be empty")
    data = fetch(manager_url, kubeconfig, context, namespace, service, cacert)
    try:
        inp = parse(data)
        wl, counts = to_workload(inp)
    except BadReply as exc:
        raise UsageError(f"the manager's reply: {exc}") from None
    pols = ["default", SHIPPED]
    with _progress() as prog:
        task = prog.add_task("whatif", total=len(pols) * len(seed_list))
        mx = run_matrix("whatif", lambda seed: wl, pols, seed_list,
                        SimConfig(record_timeline=False),
                        tick=lambda p, s: prog.advance(task),
                        job_done=prog.jobs if isinstance(prog, LineProgress) else None)
    s = summary(mx)
    said = notes(counts, inp)
    if as_json:
        print(json.dumps({"format": "specon-whatif/v1", "jobs": len(wl.jobs),
                          "seeds": seed_list, "shipped": SHIPPED, **s, "notes": said},
                         indent=1))
        return
    console.print(_table(s, len(wl.jobs), len(seed_list)))
    err.print("gain: how much sooner under the shipped policy "
              f"({SHIPPED}) than under default, paired by seed. Assumptions:",
              markup=False, highlight=False, soft_wrap=True)
    for line in said:
        err.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)

"""``kubectl specon`` (the executable ``kubectl-specon``): SpeCon's view of training jobs, read
from the Kubernetes API alone through the ``kubectl`` on PATH, with the user's kubeconfig and
rights; it needs no access to the manager (docs/user-guide.md, "kubectl specon").

What it reads: the training pods (specon.names.opted_in), their ``specon.io/`` annotations,
the Events the node agent (limit changes) and the manager (migrations) post about them, and
the Nodes. A job's category and CPU limit are those of the agent's last limit Event; its moves
are the chain of completed migrations whose Events are still in the API (one hour by
default). The manager's live view (``/status/jobs``: category, limit and the predicted
completion, which only it holds) is asked through the API server's service proxy
(``--manager``) and, where it answers, is preferred; where it cannot be asked, the ETA is
blank and stderr says why.

Standard library only, like the SDK. Exit codes: 0 done, 1 failed (kubectl or the API), 2 bad
input (argparse's)."""

from __future__ import annotations

import argparse
import calendar
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from specon import __version__, names, rfc3339
from specon.cpu_speed import parse_cpu_speed

AGENT = names.REPORTER_AGENT
MANAGER = "specon-manager"  # the manager's reportingController (specon_manager.kube)
CATEGORIES = ("PC", "WC", "CC")
_LIMIT = re.compile(r"^CPU limit of container \S+ \w+ from .+? to (unlimited|(\S+) cores?\b)")
_CATEGORY = re.compile(r"; job (PC|WC|CC)\b")
_MIGRATION = re.compile(r"^migration ([^\s:]+)")
_TERMINAL = ("Succeeded", "Failed")


class Failed(Exception):
    """kubectl or the API server failed: exit 1 with this message."""


Obj = dict[str, Any]


# -- reading the cluster ---------------------------------------------------------------------
def kubectl(opts: argparse.Namespace, *args: str, raw: bool = False) -> Obj:
    """``kubectl get ARGS -o json`` (``raw``: ``kubectl get --raw ARGS``) with the user's
    kubeconfig and context, as JSON."""
    exe = shutil.which(opts.kubectl)
    if exe is None:
        raise Failed(f"{opts.kubectl} not found on PATH")
    cmd = [exe]
    if opts.kubeconfig:
        cmd.append(f"--kubeconfig={opts.kubeconfig}")
    if opts.context:
        cmd.append(f"--context={opts.context}")
    cmd += ["get", "--raw", *args] if raw else ["get", *args, "-o", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Failed(done.stderr.strip() or f"kubectl get {' '.join(args)} failed")
    try:
        out: Obj = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise Failed(f"kubectl get {' '.join(args)}: not JSON ({exc})") from None
    return out


def proxy_path(namespace: str, service: str, route: str) -> str:
    """The API server's path that proxies ``route`` to the manager's Service
    (``[SCHEME:]NAME[:PORT]``, as ``--manager`` names it)."""
    return f"/api/v1/namespaces/{namespace}/services/{service}/proxy{route}"


def manager_jobs(opts: argparse.Namespace) -> dict[tuple[str, str], Obj]:
    """The manager's jobs by (namespace, pod), each with ``eta_s`` (seconds from the manager's
    now; None: unknown), through the API server's service proxy; empty where it cannot be
    asked (why, on stderr)."""
    if not opts.manager:
        return {}
    ns, _, service = opts.manager.partition("/")
    try:
        got = kubectl(opts, proxy_path(ns, service, "/status/jobs"), raw=True)
        now, out = float(got["time"]), {}
        for j in got["jobs"]:
            left = j.get("predicted_finish_s")
            eta = None if left is None else float(j["reported"]) + float(left) - now
            out[(str(j.get("namespace")), str(j.get("pod")))] = {**j, "eta_s": eta}
    except (Failed, KeyError, TypeError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else repr(exc)
        print(f"kubectl-specon: ETA left blank: the manager ({opts.manager}) could not be asked "
              f"through the API server: {why}", file=sys.stderr)
        return {}
    return out


def _scope(opts: argparse.Namespace) -> list[str]:
    if opts.all_namespaces:
        return ["--all-namespaces"]
    return ["--namespace", opts.namespace] if opts.namespace else []


def specon_events(opts: argparse.Namespace) -> list[Obj]:
    """The agent's and the manager's Events in scope, oldest first."""
    got = kubectl(opts, "events.v1.events.k8s.io", *_scope(opts))["items"]
    mine = [e for e in got if e.get("reportingController") in (AGENT, MANAGER)]
    return sorted(mine, key=_event_time)


def _event_time(e: Obj) -> str:
    return str(e.get("eventTime") or e.get("deprecatedLastTimestamp")
               or (e.get("metadata") or {}).get("creationTimestamp") or "")


def _md(obj: Obj) -> Obj:
    md = obj.get("metadata")
    return md if isinstance(md, dict) else {}


# -- what the Events say ---------------------------------------------------------------------
def read_limit_note(note: str) -> tuple[float | None, str | None, bool]:
    """From an agent limit Event's note (specon_agent.events.LimitNote.message): the limit after
    the change in cores (None: unlimited), the job's category (None: not given) and whether
    the note was one (False: the first two are meaningless)."""
    m = _LIMIT.match(note)
    if m is None:
        return None, None, False
    cat = _CATEGORY.search(note)
    limit = None if m.group(2) is None else float(m.group(2))
    return limit, cat.group(1) if cat else None, True


def _about(events: list[Obj], ns: str, uid: str) -> list[Obj]:
    return [e for e in events if (e.get("regarding") or {}).get("uid") == uid
            and (e.get("regarding") or {}).get("namespace", ns) == ns]


def lineage(events: list[Obj], ns: str, name: str, uid: str) -> list[tuple[str, str]]:
    """This pod and the pods it replaced, newest first ((name, uid) each): a manager Event
    MigrationCompleted on a replacement names its migration, whose MigrationStarted Event is
    about the pod it replaced."""
    started: dict[str, Obj] = {}
    completed: dict[str, str] = {}  # replacement uid -> migration id
    for e in events:
        if e.get("reportingController") != MANAGER:
            continue
        m = _MIGRATION.match(str(e.get("note") or ""))
        reg = e.get("regarding") or {}
        if m is None or reg.get("namespace", ns) != ns:
            continue
        if e.get("reason") == "MigrationStarted":
            started[m.group(1)] = reg
        elif e.get("reason") == "MigrationCompleted":
            completed[str(reg.get("uid", ""))] = m.group(1)
    chain = [(name, uid)]
    seen = {uid}
    while (mid := completed.get(chain[-1][1])) is not None and mid in started:
        src = started[mid]
        if src.get("uid") in seen:
            break
        seen.add(str(src.get("uid")))
        chain.append((str(src.get("name", "")), str(src.get("uid", ""))))
    return chain


# -- the three commands ----------------------------------------------------------------------
def job_rows(opts: argparse.Namespace) -> list[Obj]:
    pods = [p for p in kubectl(opts, "pods", *_scope(opts))["items"] if names.opted_in(p)]
    events = specon_events(opts) if pods else []
    known = manager_jobs(opts) if pods else {}
    rows = []
    for p in sorted(pods, key=lambda p: (_md(p).get("namespace", ""), _md(p).get("name", ""))):
        md, ns = _md(p), str(_md(p).get("namespace", ""))
        limit, category, since = None, None, None
        for e in reversed(_about(events, ns, str(md.get("uid", "")))):
            if e.get("reportingController") == AGENT:
                limit, category, ok = read_limit_note(str(e.get("note") or ""))
                if ok:
                    since = _event_time(e)
                    break
        chain = lineage(events, ns, str(md.get("name")), str(md.get("uid", "")))
        at = known.get((ns, str(md.get("name"))))
        if at is not None and at.get("uid") not in ("", None, md.get("uid")):
            at = None  # the manager's report is of an earlier pod of that name
        source = None if since is None else "event"
        if at is not None and at.get("fresh"):  # the manager's live view is newer
            category, limit, source = at.get("category"), at.get("limit_cores"), "manager"
            since = rfc3339.seconds(float(at["reported"]))
        rows.append({
            "namespace": ns, "name": md.get("name"), "node": (p.get("spec") or {}).get(
                "nodeName"), "phase": (p.get("status") or {}).get("phase"),
            "category": category, "limit_cores": limit, "limit_since": since,
            "limit_from": source,
            "eta_s": at["eta_s"] if at is not None and at.get("fresh") else None,
            "moves": len(chain) - 1, "replaced": [n for n, _ in chain[1:]],
            "migratable": names.migratable(md.get("labels") or {}),
        })
    return rows


def node_rows(opts: argparse.Namespace) -> list[Obj]:
    nodes = kubectl(opts, "nodes")["items"]
    scoped = argparse.Namespace(**{**vars(opts), "all_namespaces": True})
    jobs = [j for j in job_rows(scoped) if j["phase"] not in _TERMINAL]
    rows = []
    for n in sorted(nodes, key=lambda n: str(_md(n).get("name"))):
        name = _md(n).get("name")
        here = [j for j in jobs if j["node"] == name]
        cond = {c.get("type"): c.get("status") for c in (n.get("status") or {}).get(
            "conditions") or ()}
        known = [j for j in here if j["limit_since"] is not None]
        limits = [j["limit_cores"] for j in known if j["limit_cores"] is not None]
        rows.append({
            "name": name, "ready": cond.get("Ready") == "True",
            "cpus": _cores((n.get("status") or {}).get("allocatable", {}).get("cpu")),
            "speed": parse_cpu_speed((_md(n).get("labels") or {}).get(names.LABEL_CPU_SPEED)),
            "jobs": len(here), **{c: sum(j["category"] == c for j in here) for c in CATEGORIES},
            "limits_cores": sum(limits) if limits else None,
            # neither a report nor a limit Event: "not known", not "unlimited"
            "unlimited": len(known) - len(limits), "unknown": len(here) - len(known),
        })
    return rows


def describe(opts: argparse.Namespace) -> Obj:
    scope = ["--namespace", opts.namespace] if opts.namespace else []
    pod = kubectl(opts, "pod", opts.pod, *scope)
    md = _md(pod)
    ns = str(md.get("namespace", ""))
    events = specon_events(argparse.Namespace(**{**vars(opts), "namespace": ns,
                                                 "all_namespaces": False}))
    chain = lineage(events, ns, str(md.get("name")), str(md.get("uid", "")))
    history = []
    for e in events:
        reg = e.get("regarding") or {}
        if (reg.get("name"), reg.get("uid")) in chain:
            who = "agent" if e.get("reportingController") == AGENT else "manager"
            history.append({"time": _event_time(e), "pod": reg.get("name"), "type": e.get("type"),
                            "reason": e.get("reason"), "from": who,
                            "instance": e.get("reportingInstance"), "note": e.get("note")})
    return {"namespace": ns, "name": md.get("name"), "uid": md.get("uid"),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"),
            "training": names.opted_in(pod),
            "labels": {k: v for k, v in (md.get("labels") or {}).items()
                       if k.startswith(names.PREFIX)},
            "annotations": {k: v for k, v in (md.get("annotations") or {}).items()
                            if k.startswith(names.PREFIX)},
            "replaced": [n for n, _ in chain[1:]], "history": history}


# -- printing --------------------------------------------------------------------------------
def _cores(q: Any) -> float | None:
    if q is None:
        return None
    s = str(q)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _age(stamp: str | None, now: float) -> str:
    if not stamp:
        return "-"
    return _dur(now - calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def _dur(seconds: float | None) -> str:
    """A duration as kubectl shows ages (none below zero)."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def table(heads: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in heads]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(heads))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def show_jobs(rows: list[Obj], wide_ns: bool, now: float) -> str:
    if not rows:
        return "No SpeCon training pods found."
    heads = ["NAME", "NODE", "STATUS", "CATEGORY", "LIMIT", "SINCE", "ETA", "MOVES"]
    out = [[r["name"], r["node"] or "-", r["phase"] or "-", r["category"] or "-",
            "-" if r["limit_since"] is None else (
                "unlimited" if r["limit_cores"] is None else f"{r['limit_cores']:g}"),
            _age(r["limit_since"], now), _dur(r["eta_s"]), r["moves"]] for r in rows]
    if wide_ns:
        heads.insert(0, "NAMESPACE")
        out = [[r["namespace"], *o] for r, o in zip(rows, out, strict=True)]
    return table(heads, out)


def show_nodes(rows: list[Obj]) -> str:
    return table(["NAME", "READY", "CPUS", "SPEED", "JOBS", *CATEGORIES, "LIMITS", "UNLIMITED",
                  "UNKNOWN"],
                 [[r["name"], "yes" if r["ready"] else "no", _g(r["cpus"]), _g(r["speed"]),
                   r["jobs"],
                   *(r[c] for c in CATEGORIES), _g(r["limits_cores"]), r["unlimited"],
                   r["unknown"]] for r in rows])


def show_pod(d: Obj, now: float) -> str:
    lines = [f"Name:        {d['name']}", f"Namespace:   {d['namespace']}",
             f"Node:        {d['node'] or '-'}", f"Status:      {d['phase'] or '-'}",
             f"Training:    {'yes' if d['training'] else 'no (not opted in)'}",
             f"Replaced:    {', '.join(d['replaced']) or '-'}", "SpeCon labels/annotations:"]
    lines += [f"  {k}={v}" for k, v in sorted({**d["labels"], **d["annotations"]}.items())]
    lines += ["  <none>"] if not (d["labels"] or d["annotations"]) else []
    lines.append("History:")
    if not d["history"]:
        lines.append("  <none>")
    else:
        rows = [[_age(h["time"], now), h["pod"], f"{h['from']}/{h['instance']}", h["reason"],
                 h["note"]] for h in d["history"]]
        lines += ["  " + r for r in table(["AGE", "POD", "FROM", "REASON", "NOTE"],
                                          rows).splitlines()]
    return "\n".join(lines)


# -- the command line ------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    common.add_argument("-o", "--output", choices=("table", "json"), default="table")
    common.add_argument("--kubeconfig", help="the kubeconfig (default: kubectl's)")
    common.add_argument("--context", help="the kubeconfig context")
    common.add_argument("--kubectl", default="kubectl", help=argparse.SUPPRESS)
    common.add_argument(
        "--manager", default="specon-system/https:specon-manager:https",
        help="the manager's Service, NAMESPACE/[SCHEME:]NAME[:PORT], asked for the ETA "
             "through the API server (needs get services/proxy there); '' not to ask")
    p = argparse.ArgumentParser(
        prog="kubectl specon", description="SpeCon's view of training jobs, from the API.",
        epilog="docs/user-guide.md, 'kubectl specon'.")
    p.add_argument("--version", action="version", version=f"kubectl-specon {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    get = sub.add_parser("get", parents=[common], help="training jobs: category, limit, moves")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    d = sub.add_parser("describe", parents=[common], help="one pod's SpeCon history")
    d.add_argument("pod")
    sub.add_parser("nodes", parents=[common], help="nodes: their training jobs and limits")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    opts.all_namespaces = getattr(opts, "all_namespaces", False)
    if opts.all_namespaces and opts.namespace:
        parser().error("-n and -A exclude each other")
    now = time.time()
    try:
        data: Any
        if opts.command == "get":
            data = job_rows(opts)
            text = show_jobs(data, opts.all_namespaces, now)
        elif opts.command == "nodes":
            data = node_rows(opts)
            text = show_nodes(data)
        else:
            data = describe(opts)
            text = show_pod(data, now)
    except Failed as exc:
        print(f"kubectl-specon: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2) if opts.output == "json" else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m specon_manager.drain``: the chart's ``helm uninstall`` hooks (pre-delete).

``helm uninstall`` deletes a workload together with its RBAC and ServiceAccount, so a pod still
terminating can no longer write what it must on its way out. These hooks run before helm
deletes anything: each deletes one workload (foreground: its pods go first) and waits until
none of its pods is left, so each pod ends while it still holds its rights.

- ``--daemonset``, the agents: each puts back the CPU limits it changed (with the ``resize``
  actuator, through the API server).
- ``--deployment``, the manager: its leader hands over the bare pods' gated replacements
  (specon_manager/shutdown_handover.py), while the scheduler, deleted after the hook, still runs.

Past ``--timeout-s`` it exits 1 naming the pods still there; ``helm uninstall --no-hooks``
skips it (docs/user-guide.md, "Uninstall")."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specon_manager.kube import Kube, KubeError, meta, pod_path
from specon_manager.kube_connect import KubeConfigError, connect

log = logging.getLogger("specon_manager.drain")


def drain(kube: Kube, namespace: str, name: str, selector: str, timeout_s: float,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep, kind: str = "daemonsets") -> list[str]:
    """Delete the workload (``kind`` daemonsets or deployments, named ``name``) and wait
    for its pods to be gone; the names of those still there at the deadline (empty: all
    gone)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/{kind}/{name}"
    what = f"{kind[:-1]} {namespace}/{name}"
    try:
        kube.delete(path, {"propagationPolicy": "Foreground"})
        log.info("deleted %s; waiting for its pods to exit", what)
    except KubeError as exc:
        if exc.status != 404:
            raise
        log.info("%s is gone already", what)
    deadline = clock() + timeout_s
    while True:
        left = [meta(p)["name"] for p in kube.list(pod_path(namespace), labelSelector=selector)]
        if not left or clock() >= deadline:
            return left
        sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specon_manager.drain", description=__doc__)
    ap.add_argument("--namespace", required=True, help="the release's namespace")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--daemonset", help="the agents' DaemonSet")
    which.add_argument("--deployment", help="the manager's Deployment")
    ap.add_argument("--selector", required=True, help="label selector of its pods")
    ap.add_argument("--timeout-s", type=float, default=120.0,
                    help="longest wait for its pods to exit (default 120)")
    ap.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    args = ap.parse_args(argv)
    if not args.timeout_s > 0:
        ap.error(f"--timeout-s must be positive, not {args.timeout_s:g}")
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        kube = connect(args.kubeconfig)
    except KubeConfigError as exc:
        print(f"specon-manager drain: no API access: {exc}", file=sys.stderr)
        return 2 if exc.bad_input else 1
    try:
        name, kind = ((args.daemonset, "daemonsets") if args.daemonset else
                      (args.deployment, "deployments"))
        left = drain(kube, args.namespace, name, args.selector, args.timeout_s, kind=kind)
    except KubeError as exc:
        print(f"specon-manager drain: {exc}", file=sys.stderr)
        return 1
    finally:
        kube.close()
    if left:
        harm = ("their CPU limits may not all be restored" if args.daemonset else
                "a migration's gated replacement may be left gated (docs/user-guide.md, "
                "Uninstall)")
        print(f"specon-manager drain: pods still there after {args.timeout_s:g} s: "
              f"{', '.join(sorted(left))}; {harm} (see their logs); 'helm uninstall "
              "--no-hooks' skips this wait", file=sys.stderr)
        return 1
    log.info("every pod of %s has exited", args.daemonset or args.deployment)
    return 0


if __name__ == "__main__":
    sys.exit(main())

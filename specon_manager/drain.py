"""``python -m specon_manager.drain``: the chart's ``helm uninstall`` hook (pre-delete).

Each agent puts back the CPU limits it changed when it gets SIGTERM. With the ``resize``
actuator it does so through the API server, with its own RBAC, and ``helm uninstall`` deletes
that RBAC together with the DaemonSet: agents still terminating could no longer restore. This
hook runs before helm deletes anything: it deletes the agents' DaemonSet (foreground: its pods
go first) and waits until no agent pod is left, so every agent restores while it still holds
its rights. Past ``--timeout-s`` it exits 1 naming the pods still there; ``helm uninstall
--no-hooks`` skips it (docs/user-guide.md, "Uninstalling")."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specon_manager.kube import Kube, KubeError, meta, pod_path

log = logging.getLogger("specon_manager.drain")


def drain(kube: Kube, namespace: str, daemonset: str, selector: str, timeout_s: float,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Delete the DaemonSet and wait for its pods to be gone; the names of those still there
    at the deadline (empty: all gone)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{daemonset}"
    try:
        kube.delete(path, {"propagationPolicy": "Foreground"})
        log.info("deleted daemonset %s/%s; waiting for its pods to restore and exit",
                 namespace, daemonset)
    except KubeError as exc:
        if exc.status != 404:
            raise
        log.info("daemonset %s/%s is gone already", namespace, daemonset)
    deadline = clock() + timeout_s
    while True:
        left = [meta(p)["name"] for p in kube.list(pod_path(namespace), labelSelector=selector)]
        if not left or clock() >= deadline:
            return left
        sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specon_manager.drain", description=__doc__)
    ap.add_argument("--namespace", required=True, help="the release's namespace")
    ap.add_argument("--daemonset", required=True, help="the agents' DaemonSet")
    ap.add_argument("--selector", required=True, help="label selector of the agents' pods")
    ap.add_argument("--timeout-s", type=float, default=120.0,
                    help="longest wait for the agents to exit (default 120)")
    ap.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    args = ap.parse_args(argv)
    if not args.timeout_s > 0:
        ap.error(f"--timeout-s must be positive, not {args.timeout_s:g}")
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        kube = Kube.from_kubeconfig(args.kubeconfig) if args.kubeconfig else Kube.in_cluster()
    except (OSError, ValueError, KubeError) as exc:
        print(f"specon-manager drain: no API access: {exc}", file=sys.stderr)
        return 2
    try:
        left = drain(kube, args.namespace, args.daemonset, args.selector, args.timeout_s)
    except KubeError as exc:
        print(f"specon-manager drain: {exc}", file=sys.stderr)
        return 1
    finally:
        kube.close()
    if left:
        print(f"specon-manager drain: agent pods still there after {args.timeout_s:g} s: "
              f"{', '.join(sorted(left))}; their CPU limits may not all be restored (see their "
              "logs); 'helm uninstall --no-hooks' skips this wait", file=sys.stderr)
        return 1
    log.info("every agent pod has exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Kubernetes in-place pod resize: sets a container's CPU limit through the pod's ``resize``
subresource (beta and on by default since 1.33), so the API knows the limit the agent chose.

A container is addressed by its runtime ID, mapped to (namespace, pod, container) with
:meth:`ResizeActuator.register` (discovery knows all three). After each write the pod's status
is read back: ``PodResizePending`` with reason ``Infeasible`` is a failure; ``Deferred`` and
``PodResizeInProgress`` are reported in the log. A cluster without resize support (no
subresource, or a node that cannot resize) makes the actuator unavailable with one clear log
line; the agent then keeps the limits as they are. A 429 (the API server's priority and
fairness shedding load) is sent again after its ``Retry-After``, a bounded number of times
(specon/retry_after.py, shared with the manager's client).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specon.quantity import millicores as cpu_quantity
from specon.quantity import parse_cpu
from specon.retry_after import RETRY_429, retry_after_s

from .base import (
    DEFAULT_PERIOD_US,
    Actuator,
    ActuatorError,
    ActuatorUnavailable,
    ContainerGone,
    CpuLimit,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodContainer:
    namespace: str
    pod: str
    container: str


def millicores(limit: CpuLimit) -> str:
    return cpu_quantity(limit.cores or 0.0)


class ResizeActuator(Actuator):
    name = "resize"

    def __init__(self, node_cpus: float | None, server: str,
                 token: str | Callable[[], str | None] | None = None,
                 ca_file: str | None = None, period_us: int = DEFAULT_PERIOD_US,
                 min_step: float = 0.0, set_requests: bool = False,
                 timeout: float = 10.0) -> None:
        # The agent runs on the node it controls: its CPU count is the node's by default.
        super().__init__(node_cpus or float(os.cpu_count() or 1), period_us, min_step)
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=ca_file)
                                         if ca_file else True)
        # A function is asked before each request: the token it returns may have been rotated.
        self._token = token if callable(token) else (lambda: token or None)
        self._http = httpx.Client(base_url=server.rstrip("/"), verify=verify, timeout=timeout,
                                  auth=self._auth)
        self.set_requests = set_requests
        self._where: dict[str, PodContainer] = {}
        self.unsupported: str | None = None
        self.timeout = timeout
        #: How a 429's wait is spent (tests record it instead).
        self.sleep: Callable[[float], None] = time.sleep

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The API server's answer, a 429 sent again after its Retry-After (at most the
        client's timeout each, RETRY_429 times); errors as httpx raises them."""
        for _ in range(RETRY_429):
            r = self._http.request(method, path, **kwargs)
            if r.status_code != 429:
                return r
            wait = retry_after_s(r.headers.get("Retry-After"), self.timeout)
            log.info("%s %s throttled by the API server (429): again in %.1f s", method, path,
                     wait)
            self.sleep(wait)
        return self._http.request(method, path, **kwargs)

    def _auth(self, request: httpx.Request) -> httpx.Request:
        try:
            token = self._token()
        except Exception as exc:  # an unreadable token file, a failing exec plugin
            raise httpx.RequestError(f"no bearer token: {exc}", request=request) from exc
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        return request

    def register(self, container_id: str, namespace: str, pod: str, container: str) -> None:
        super().register(container_id, namespace, pod, container)
        self._where[container_id] = PodContainer(namespace, pod, container)

    def forget(self, container_id: str) -> None:
        super().forget(container_id)
        self._where.pop(container_id, None)

    def _path(self, where: PodContainer) -> str:
        return f"/api/v1/namespaces/{where.namespace}/pods/{where.pod}"

    def _locate(self, container_id: str) -> PodContainer:
        where = self._where.get(container_id)
        if where is None:
            raise ContainerGone(container_id, "not registered with the resize actuator")
        return where

    def _pod(self, container_id: str) -> dict[str, Any]:
        where = self._locate(container_id)
        try:
            r = self._send("GET", self._path(where))
        except httpx.HTTPError as exc:
            raise ActuatorError(container_id, f"API server unreachable: {exc}") from exc
        if r.status_code == 404:
            raise ContainerGone(container_id, f"pod {where.namespace}/{where.pod} is gone")
        if r.status_code >= 400:
            raise ActuatorError(container_id, f"reading the pod: {r.status_code} {r.text[:200]}")
        pod: dict[str, Any] = r.json()
        return pod

    def _container(self, pod: dict[str, Any], container_id: str) -> dict[str, Any]:
        name = self._locate(container_id).container
        for c in pod.get("spec", {}).get("containers", []):
            if c.get("name") == name:
                out: dict[str, Any] = c
                return out
        raise ContainerGone(container_id, f"no container {name!r} in the pod")

    def read(self, container_id: str) -> CpuLimit:
        c = self._container(self._pod(container_id), container_id)
        cpu = ((c.get("resources") or {}).get("limits") or {}).get("cpu")
        if cpu is None:
            return CpuLimit(None, self.period_us)
        return CpuLimit(round(parse_cpu(cpu) * self.period_us), self.period_us)

    def _write(self, container_id: str, before: CpuLimit, after: CpuLimit) -> None:
        if self.unsupported:
            raise ActuatorUnavailable(container_id, self.unsupported)
        where = self._locate(container_id)
        pod = self._pod(container_id)
        resources: dict[str, Any] = {"limits": {"cpu": millicores(after)}}
        requested = ((self._container(pod, container_id).get("resources") or {})
                     .get("requests") or {}).get("cpu")
        # A request above the new limit is refused by validation: lower it with the limit.
        if self.set_requests or (requested is not None
                                 and parse_cpu(requested) > (after.cores or 0.0)):
            resources["requests"] = {"cpu": millicores(after)}
        body = {"spec": {"containers": [{"name": where.container, "resources": resources}]}}
        try:
            r = self._send("PATCH", self._path(where) + "/resize", json=body, headers={
                "Content-Type": "application/strategic-merge-patch+json"})
        except httpx.HTTPError as exc:
            raise ActuatorError(container_id, f"API server unreachable: {exc}") from exc
        # The pod was just read, so a 404 that does not name it is a missing subresource.
        pod_gone = r.status_code == 404 and f'"{where.pod}" not found' in r.text
        if (r.status_code == 404 and not pod_gone) or r.status_code == 405 or (
                r.status_code == 422 and "without support for resize" in r.text):
            self.unsupported = (f"in-place pod resize is not supported here ({r.status_code}: "
                                f"{r.text[:160]}); CPU limits stay as they are: use the docker "
                                "or cgroup actuator on this node")
            log.error("%s", self.unsupported)
            raise ActuatorUnavailable(container_id, self.unsupported)
        if pod_gone:
            raise ContainerGone(container_id, f"pod {where.namespace}/{where.pod} is gone")
        if r.status_code >= 400:
            raise ActuatorError(container_id, f"resize refused: {r.status_code} {r.text[:300]}")
        self._check_status(container_id, r.json())

    def _check_status(self, container_id: str, pod: dict[str, Any]) -> None:
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "PodResizePending" and cond.get("status") == "True":
                if cond.get("reason") == "Infeasible":
                    raise ActuatorError(container_id, "resize infeasible on this node: "
                                                      f"{cond.get('message', '')}")
                log.info("resize of %s deferred by the kubelet: %s", container_id,
                         cond.get("message", ""))
            elif cond.get("type") == "PodResizeInProgress" and cond.get("status") == "True":
                log.info("resize of %s in progress", container_id)

    def applied(self, container_id: str) -> CpuLimit | None:
        """The limit the kubelet reports as applied (``status.containerStatuses[].resources``),
        or None when it reports none."""
        pod = self._pod(container_id)
        name = self._locate(container_id).container
        for st in (pod.get("status") or {}).get("containerStatuses") or ():
            if st.get("name") == name:
                cpu = ((st.get("resources") or {}).get("limits") or {}).get("cpu")
                if cpu is not None:
                    return CpuLimit(round(parse_cpu(cpu) * self.period_us), self.period_us)
        return None

    def close(self) -> None:
        self._http.close()

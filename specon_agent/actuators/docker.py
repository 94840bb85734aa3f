"""CPU limits through the Docker Engine API (the `docker` package): quota/period update and
read-back from ``docker inspect``. Serves Docker hosts (standalone FlowCon) and cri-dockerd nodes.
"""

from __future__ import annotations

from typing import Any

import docker
import docker.errors
import requests

from .base import (
    DEFAULT_PERIOD_US,
    Actuator,
    ActuatorError,
    ActuatorUnavailable,
    ContainerGone,
    CpuLimit,
    bare_id,
)

# Docker enforces ``--cpus`` (NanoCpus) with this fixed CFS period.
_NANO_PERIOD_US = 100_000


class DockerActuator(Actuator):
    """Writes ``HostConfig.CpuQuota``/``CpuPeriod`` with ``docker update``'s API call.

    A container started with ``--cpus`` keeps its limit in ``NanoCpus``, which the engine does
    not let one mix with a quota on update; such a container is updated through ``NanoCpus``.
    ``node_cpus`` defaults to the engine's ``NCPU``.
    """

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        node_cpus: float | None = None,
        period_us: int = DEFAULT_PERIOD_US,
        min_step: float = 0.0,
    ) -> None:
        try:
            self.client = client if client is not None else docker.from_env()
            if node_cpus is None:
                node_cpus = float(self.client.info()["NCPU"])
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise ActuatorUnavailable("-", f"no Docker Engine answers: {exc}") from exc
        super().__init__(node_cpus, period_us, min_step)
        self._nano: set[str] = set()

    def _inspect(self, container_id: str) -> dict[str, Any]:
        try:
            attrs: dict[str, Any] = self.client.api.inspect_container(bare_id(container_id))
        except docker.errors.NotFound as exc:
            raise ContainerGone(container_id, "no such container") from exc
        except docker.errors.APIError as exc:
            raise ActuatorError(container_id, f"inspect failed: {exc.explanation}") from exc
        except requests.RequestException as exc:
            raise ActuatorUnavailable(container_id, f"Docker Engine unreachable: {exc}") from exc
        return attrs

    def read(self, container_id: str) -> CpuLimit:
        host = self._inspect(container_id)["HostConfig"]
        nano = int(host.get("NanoCpus") or 0)
        if nano > 0:
            self._nano.add(container_id)
            return CpuLimit(round(nano * _NANO_PERIOD_US / 1e9), _NANO_PERIOD_US)
        self._nano.discard(container_id)
        quota = int(host.get("CpuQuota") or 0)
        period = int(host.get("CpuPeriod") or 0) or DEFAULT_PERIOD_US
        return CpuLimit(quota if quota > 0 else None, period)

    def _write(self, container_id: str, before: CpuLimit, after: CpuLimit) -> None:
        cid = bare_id(container_id)
        try:
            if container_id in self._nano:
                cores = self.node_cpus if after.cores is None else after.cores
                # docker-py's update_container has no NanoCpus argument: call the endpoint.
                url = f"{self.client.api.base_url}/v{self.client.api.api_version}"
                response = self.client.api.post(
                    f"{url}/containers/{cid}/update", json={"NanoCpus": round(cores * 1e9)}
                )
                if response.status_code == 404:
                    raise ContainerGone(container_id, "no such container")
                if response.status_code >= 400:
                    raise ActuatorError(
                        container_id, f"update refused ({response.status_code}): {response.text}"
                    )
            else:
                self.client.api.update_container(
                    cid,
                    cpu_period=after.period_us,
                    cpu_quota=after.quota_us if after.quota_us is not None else -1,
                )
        except docker.errors.NotFound as exc:
            raise ContainerGone(container_id, "no such container") from exc
        except docker.errors.APIError as exc:
            if "marked for removal" in str(exc.explanation):
                raise ContainerGone(container_id, "container is being removed") from exc
            raise ActuatorError(container_id, f"update refused: {exc.explanation}") from exc
        except requests.RequestException as exc:
            raise ActuatorUnavailable(container_id, f"Docker Engine unreachable: {exc}") from exc

    def forget(self, container_id: str) -> None:
        super().forget(container_id)
        self._nano.discard(container_id)

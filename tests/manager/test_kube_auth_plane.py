"""The manager's Kubernetes client keeps its credentials fresh, against the real API server:
a rotated token file is read again without a restart, a kubeconfig ``exec`` plugin's token is
cached until it expires or is refused, and ``tls-server-name`` is the name the certificate is
checked against. A rotation is two TokenRequest tokens of two ServiceAccounts (``old``, then
``new``): the file's content is swapped, and deleting ``old`` makes its token invalid (401)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import execplugin
import pytest
import yaml
from planelib import Plane
from planemanager import wait_for

from specon_manager import kube as kube_module
from specon_manager.kube import TRANSPORT, Kube, KubeError
from specon_manager.kube_auth import TokenFile

pytestmark = pytest.mark.plane
SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def whoami(kube: Kube) -> str:
    """The user the API server took this client for (any authenticated user may ask)."""
    review: dict[str, Any] = kube.create(SELF_REVIEW, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return str(review["status"]["userInfo"]["username"])


def sa_user(ns: str, name: str) -> str:
    return f"system:serviceaccount:{ns}:{name}"


@pytest.fixture
def accounts(plane: Plane, plane_namespace: str) -> tuple[str, str, str]:
    """A namespace and the tokens of its ServiceAccounts ``old`` and ``new`` (10 minutes:
    TokenRequest's shortest)."""
    ns = plane_namespace
    for name in ("old", "new"):
        plane.kubectl("create", "serviceaccount", "-n", ns, name)
    return ns, plane.request_token(ns, "old"), plane.request_token(ns, "new")


@pytest.fixture
def closing() -> Iterator[Callable[[Kube], Kube]]:
    """Closes every client passed through it when the test ends, passed or not."""
    clients: list[Kube] = []
    yield lambda kube: clients.append(kube) or kube
    for kube in clients:
        kube.close()


def revoke_old(plane: Plane, ns: str, old_token: str) -> None:
    """Delete ServiceAccount ``old``: its tokens are refused from then on."""
    plane.kubectl("delete", "serviceaccount", "-n", ns, "old")
    probe = Kube(plane.server, token=old_token, ca_file=str(plane.ca_file))

    def refused() -> bool:
        try:
            whoami(probe)
        except KubeError as exc:
            return exc.status == 401
        return False

    wait_for("the old token refused", refused)
    probe.close()


def rotate_and_revoke(plane: Plane, accounts: tuple[str, str, str], kube: Kube,
                      token: Path) -> None:
    """The client acts as ``old``; write ``new`` into ``token`` (where its credentials come
    from) and revoke ``old``: the next request is refused once (401), then sent again as
    ``new`` with the token read again."""
    ns, old, new = accounts
    assert whoami(kube) == sa_user(ns, "old")
    token.write_text(new)
    revoke_old(plane, ns, old)
    assert whoami(kube) == sa_user(ns, "new")


def test_in_cluster_client_reads_the_rotated_token_file_without_a_restart(
    plane: Plane, accounts: tuple[str, str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, closing: Callable[[Kube], Kube]
) -> None:
    ns, old, new = accounts
    # The pod's service-account folder, as the kubelet projects it.
    shutil.copy(plane.ca_file, tmp_path / "ca.crt")
    (tmp_path / "token").write_text(old)
    monkeypatch.setattr(kube_module, "SA_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(plane.ports["apiserver"]))
    kube = closing(Kube.in_cluster())
    assert whoami(kube) == sa_user(ns, "old")
    (tmp_path / "token").write_text(new)  # the kubelet's rotation; the old token stays valid
    wait_for("the new token in use", lambda: whoami(kube) == sa_user(ns, "new"))


def test_a_refused_token_is_read_again_at_once(
    plane: Plane, accounts: tuple[str, str, str], tmp_path: Path,
    closing: Callable[[Kube], Kube]
) -> None:
    token = tmp_path / "token"
    token.write_text(accounts[1])
    # Never re-read on its own: only the 401 can make it read the file again.
    kube = closing(Kube(plane.server, token=TokenFile(token, recheck_s=3600),
                        ca_file=str(plane.ca_file)))
    rotate_and_revoke(plane, accounts, kube, token)


@pytest.mark.parametrize("api_version", ["client.authentication.k8s.io/v1",
                                         "client.authentication.k8s.io/v1beta1"])
def test_exec_plugin_token_is_cached_and_renewed_when_refused(
    plane: Plane, accounts: tuple[str, str, str], tmp_path: Path, api_version: str,
    closing: Callable[[Kube], Kube]
) -> None:
    folder = tmp_path / "kube"
    config = execplugin.write(folder, plane.server, plane.ca_file, accounts[1], api_version,
                              life_s=3600)
    # Relative CA and command: found beside the file.
    kube = closing(Kube.from_kubeconfig(config))
    assert whoami(kube) == sa_user(accounts[0], "old")
    assert whoami(kube) == sa_user(accounts[0], "old")
    runs = execplugin.runs(folder)
    assert len(runs) == 1  # the token is kept until it expires
    assert runs[0]["apiVersion"] == api_version
    spec: Any = runs[0]["spec"]
    assert spec["interactive"] is False and spec["cluster"]["server"] == plane.server
    rotate_and_revoke(plane, accounts, kube, folder / "token")  # refused: the plugin runs again
    assert len(execplugin.runs(folder)) == 2


def test_exec_plugin_runs_again_once_its_token_expires(
    plane: Plane, accounts: tuple[str, str, str], tmp_path: Path,
    closing: Callable[[Kube], Kube]
) -> None:
    ns, old, _ = accounts
    folder = tmp_path / "kube"
    # A token that expires within the renewal margin is renewed before each request.
    kube = closing(Kube.from_kubeconfig(execplugin.write(folder, plane.server, plane.ca_file,
                                                         old, life_s=1)))
    assert whoami(kube) == sa_user(ns, "old")
    assert whoami(kube) == sa_user(ns, "old")
    assert len(execplugin.runs(folder)) == 2


def _with_server_name(plane: Plane, path: Path, name: str) -> Path:
    doc = yaml.safe_load(plane.kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["tls-server-name"] = name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_tls_server_name_is_the_name_checked(plane: Plane, tmp_path: Path) -> None:
    # The server is reached at 127.0.0.1; its certificate also names "kubernetes".
    good = Kube.from_kubeconfig(_with_server_name(plane, tmp_path / "good", "kubernetes"))
    assert whoami(good) == "admin"
    good.close()
    bad = Kube.from_kubeconfig(_with_server_name(plane, tmp_path / "bad", "elsewhere.example"))
    with pytest.raises(KubeError) as exc:
        whoami(bad)
    assert exc.value.status == TRANSPORT and "elsewhere.example" in str(exc.value)
    bad.close()

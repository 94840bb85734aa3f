"""The manager's and the drain hook's API client from a kubeconfig or the pod's service
account, with one clear line when neither can be used (a KeyError traceback before)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import yaml

from .kube import Kube


class KubeConfigError(Exception):
    """No usable API configuration. ``bad_input``: a named kubeconfig that cannot be used
    (exit 2); otherwise the pod's service account is missing (exit 1: not in a pod)."""

    def __init__(self, message: str, bad_input: bool) -> None:
        super().__init__(message)
        self.bad_input = bad_input


def connect(kubeconfig: Path | str | None) -> Kube:
    """:meth:`Kube.from_kubeconfig` when a file is named, else :meth:`Kube.in_cluster`."""
    if kubeconfig is not None:
        try:
            return Kube.from_kubeconfig(kubeconfig)
        except ssl.SSLError as exc:  # before OSError, its base class
            raise KubeConfigError(f"kubeconfig {kubeconfig}: its certificates cannot be used "
                                  f"({exc.reason or exc})", True) from None
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(
                kubeconfig) else ""
            raise KubeConfigError(f"kubeconfig {kubeconfig}: cannot read{where}: "
                                  f"{exc.strerror or exc}", True) from None
        except yaml.YAMLError:
            raise KubeConfigError(f"kubeconfig {kubeconfig}: not valid YAML", True) from None
        except (KeyError, StopIteration, TypeError, AttributeError, ValueError):
            raise KubeConfigError(f"kubeconfig {kubeconfig}: not a usable kubeconfig (it needs "
                                  "a current-context naming a cluster and a user)", True) from None
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise KubeConfigError("not in a pod (KUBERNETES_SERVICE_HOST is unset) and no "
                              "kubeconfig given", False)
    try:
        return Kube.in_cluster()
    except (OSError, ssl.SSLError) as exc:
        raise KubeConfigError(f"the pod's service account cannot be read ({exc})", False) \
            from None

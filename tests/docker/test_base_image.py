"""The local base image (hack/images/build-base.sh) runs Python with PyTorch, NumPy and sklearn."""

from __future__ import annotations

import docker
import pytest
from dockerlib import RUN

pytestmark = pytest.mark.docker


def test_base_image_runs_python_and_torch(engine: docker.DockerClient, base_image: str) -> None:
    script = (
        "import sys, numpy, sklearn, torch; "
        "x = torch.ones(3, requires_grad=True); (x * 2).sum().backward(); "
        "print(sys.version.split()[0], torch.__version__, numpy.__version__, sklearn.__version__, "
        "int(x.grad.sum()))"
    )
    out = engine.containers.run(
        base_image, ["python3", "-c", script], remove=True, **RUN, user="1000:1000"
    ).decode()
    python, torch_version, numpy_version, sklearn_version, grad = out.split()
    assert python.startswith("3.11.")
    assert torch_version.startswith("1.13.")
    assert numpy_version.startswith("1.24.")
    assert sklearn_version.startswith("1.2.")
    assert grad == "6"  # autograd works: d(sum(2x))/dx = 2 for each of 3 elements

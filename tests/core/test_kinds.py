"""A job's kind (specon.kinds): the ``specon.io/kind`` label, else the container's image;
whatever a pod names is kept only when it is a plausible name of bounded length, and a wire
report refuses any other."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specon.core.categorize import Category
from specon.core.job_loads import new_job_load, reported_load
from specon.core.progress import NodeLoad
from specon.kinds import MAX_KIND, container_image, job_kind, pod_kind, valid_kind
from specon.names import LABEL_KIND
from specon.wire import JobReport


@pytest.mark.parametrize(("value", "ok"), [
    ("pytorch/train:2.1", True), ("registry.example:5000/team/img@sha256:" + "a" * 64, True),
    ("sweep-7", True), ("a" * MAX_KIND, True), ("a" * (MAX_KIND + 1), False), ("", False),
    ("-lead", False), ("has space", False), ("new\nline", False), ("x\x00", False),
    ("ünï", False), (7, False), (None, False), (["img"], False),
])
def test_a_kind_is_a_plausible_name_of_bounded_length(value: Any, ok: bool) -> None:
    assert valid_kind(value) == (value if ok else None)
    report = {"namespace": "ns", "pod": "p", "category": "PC", "kind": value}
    if ok or value is None:
        assert JobReport.model_validate(report).kind == value
    else:
        with pytest.raises(ValidationError, match="kind"):
            JobReport.model_validate(report)


def test_the_label_names_the_kind_else_the_image() -> None:
    assert job_kind({LABEL_KIND: "sweep"}, "img:1") == "sweep"
    assert job_kind({}, "img:1") == "img:1"
    assert job_kind({LABEL_KIND: "bad kind"}, "img:1") == "img:1"
    assert job_kind({LABEL_KIND: "bad kind"}, None) is None
    assert job_kind("not a map", "img:1") == "img:1"


@pytest.mark.parametrize(("pod", "kind"), [
    ({"metadata": {"labels": {LABEL_KIND: "k"}}, "spec": {"containers": [{"image": "i"}]}}, "k"),
    ({"spec": {"containers": [{"image": "i"}, {"image": "sidecar"}]}}, "i"),
    ({"spec": {"containers": []}}, None), ({"spec": "x"}, None), ({}, None),
    ({"metadata": [], "spec": {"containers": ["x"]}}, None),
])
def test_a_pods_kind_is_its_label_or_its_first_containers_image(pod: Any,
                                                              kind: str | None) -> None:
    assert pod_kind(pod) == kind


def test_a_containers_image_is_the_one_its_spec_names() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "ia"}, {"name": "b", "image": 3}]}}
    assert (container_image(pod, "a"), container_image(pod, "b"),
            container_image(pod, "c"), container_image({}, "a")) == ("ia", None, None, None)


def test_a_new_job_is_the_typical_job_of_its_kind_only_where_speeds_are_known() -> None:
    wide = [reported_load("w", 9600.0, 32, cap=16.0)]
    nodes = [NodeLoad("n", 32, 1.0, (reported_load("s", 600.0, 32, cap=1.0),))]
    kind = new_job_load(wide, nodes, 32)
    assert (kind.work, kind.cap) == (9600.0, 16.0)
    typical = new_job_load([], nodes, 32)
    assert (typical.work, typical.cap) == (600.0, 1.0)
    # no work left among the kind's jobs, or speeds unknown: the nodes' typical job
    done = [reported_load("w", 0.0, 32, Category.CONVERGED, cap=16.0)]
    assert new_job_load(done, nodes, 32).work == 600.0
    blind = new_job_load(wide, nodes, 32, by_cores=False)
    assert (blind.work, blind.cap) == (600.0, 32)

"""Pydantic models of the v1 profile and workload files (docs: workload-format.md).

Unknown keys are errors; every number is checked for sign and finiteness.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specon.core.speedup import Curve

FORMAT = "specon-workload/v1"

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Profile(_Strict):
    """One training job's measured behaviour."""

    name: str = Field(min_length=1)
    iterations: int = Field(gt=0)
    loss: tuple[Annotated[float, Field(allow_inf_nan=False)], ...] = Field(min_length=2)
    cpu_seconds_per_iteration: Positive
    speedup: dict[str, Positive]
    checkpoint_seconds: NonNegative
    restore_seconds: NonNegative
    checkpoint_bytes: int = Field(ge=0)
    memory_mb: NonNegative | None = None

    @field_validator("speedup")
    @classmethod
    def _speedup_keys(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("needs at least one entry, e.g. {\"1\": 1.0}")
        for key in v:
            try:
                cores = float(key)
            except ValueError:
                raise ValueError(f"key {key!r} is not a number of cores") from None
            if not (cores > 0 and math.isfinite(cores)):
                raise ValueError(f"key {key!r} must be a positive number of cores")
        return v

    def speedup_points(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        pts = sorted((float(k), s) for k, s in self.speedup.items())
        return tuple(p[0] for p in pts), tuple(p[1] for p in pts)

    @property
    def max_cores(self) -> float:
        """The job cannot use more cores than the largest measured key."""
        return max(float(k) for k in self.speedup)

    def speed(self, cores: float) -> float:
        """Speed with ``cores`` cores relative to one core (linear below the smallest key)."""
        return _curve(tuple(sorted((float(k), v) for k, v in self.speedup.items()))).at(cores)


@functools.cache
def _curve(points: tuple[tuple[float, float], ...]) -> Curve:
    return Curve.of(points)


class WorkerSpec(_Strict):
    name: str = Field(min_length=1)
    cpus: Positive
    speed: Positive = 1.0


class Cluster(_Strict):
    workers: tuple[WorkerSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Cluster:
        seen: set[str] = set()
        for w in self.workers:
            if w.name in seen:
                raise ValueError(f"worker name {w.name!r} appears twice")
            seen.add(w.name)
        return self


class JobSpec(_Strict):
    name: str = Field(min_length=1)
    profile: str = Field(min_length=1)
    submit_s: NonNegative
    work_scale: Positive = 1.0
    target_loss: Annotated[float, Field(allow_inf_nan=False)] | None = None
    deadline_s: Positive | None = None
    migratable: bool = True
    #: Extension (v1, optional): the job stops once its target loss is reached.
    stop_at_target: bool = False
    #: Optional: threads the job runs with. Default: the CPUs of the worker it runs on (what
    #: PyTorch picks), at most the profile's largest speed-up key (docs/node-model.md).
    cores: Positive | None = None


class Workload(_Strict):
    format: Literal["specon-workload/v1"]
    cluster: Cluster
    profiles: dict[str, Profile]
    jobs: tuple[JobSpec, ...] = Field(min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        seen: set[str] = set()
        biggest = max(w.cpus for w in self.cluster.workers)
        for job in self.jobs:
            if job.name in seen:
                raise ValueError(f"job {job.name!r} appears twice")
            seen.add(job.name)
            if job.profile not in self.profiles:
                known = ", ".join(sorted(self.profiles)) or "none"
                raise ValueError(
                    f"job {job.name!r}: unknown profile {job.profile!r} (known: {known})"
                )
            # A job without a thread count takes the cores it sees, so it runs anywhere.
            if job.cores is not None and job.cores > biggest:
                raise ValueError(
                    f"job {job.name!r} asks for {job.cores:g} cores but the largest worker "
                    f"has {biggest:g}"
                )
        return self

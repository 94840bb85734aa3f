"""Workload and profile files (format v1): typed models and a loader with clear errors."""

from specon.workload.load import WorkloadError, load_profile, load_workload, parse_workload
from specon.workload.models import (
    Cluster,
    JobSpec,
    Profile,
    WorkerSpec,
    Workload,
)

__all__ = [
    "Cluster",
    "JobSpec",
    "Profile",
    "WorkerSpec",
    "Workload",
    "WorkloadError",
    "load_profile",
    "load_workload",
    "parse_workload",
]

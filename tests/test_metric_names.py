"""Every metric the agent and the manager export is named by Prometheus's conventions, and each
name of the previous release is still exported, as a deprecated alias reporting its new name's
value (docs/observability.md, docs/upgrades.md). Read through the real exposition format."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from specon.metric_names import DEPRECATED, deprecated_alias
from specon_agent.metrics import AgentMetrics
from specon_manager.metrics import ManagerMetrics

#: Units a name may end with (base units; CPU amounts in cores or CPUs).
UNITS = ("_seconds", "_bytes", "_cores", "_cpus", "_per_second", "_per_core_second", "_ratio")
#: Names with no unit: counts of things, states (1 or 0), a loss. A new one must be added here
#: or carry a unit.
UNITLESS = {
    "specon_agent_job_category", "specon_agent_job_flowcon_list", "specon_agent_job_loss",
    "specon_agent_jobs", "specon_agent_job_qos_state",
    "specon_manager_heartbeat_streams", "specon_manager_nodes", "specon_manager_jobs",
    "specon_manager_qos_jobs", "specon_manager_migrations_in_flight", "specon_manager_leader",
}
#: Words of a unit that is not a base one, anywhere in a name.
NOT_BASE = re.compile(r"_(minutes?|hours?|days?|ms|milliseconds|microseconds|percent|"
                      r"[kmg]i?b|kilobytes|megabytes)(_|$)")

#: The names release 0.1 exported: each must still be served, under it or as an alias.
PREVIOUS = {
    "specon_agent_job_growth_per_minute", "specon_agent_job_growth_efficiency_per_core_minute",
    "specon_extender_requests_total", "specon_extender_request_duration_seconds",
    "specon_heartbeats_total", "specon_agent_auth_refusals_total",
    "specon_agent_token_reviews_total", "specon_heartbeats_superseded_total",
    "specon_heartbeat_jobs_ignored_total", "specon_reallocation_requests_total",
    "specon_request_bodies_refused_total", "specon_request_bodies_dropped_total",
    "specon_heartbeat_streams", "specon_nodes", "specon_jobs", "specon_qos_jobs",
    "specon_qos_invalid_pods_total", "specon_migrations_held_total", "specon_migrations_total",
    "specon_migrations_started_total", "specon_migrations_in_flight",
    "specon_migration_duration_seconds", "specon_move_cost_seconds", "specon_move_gain_seconds",
    "specon_move_gain_sum_seconds", "specon_migration_checkpoint_wait_seconds",
    "specon_rebalance_rounds_total", "specon_rebalance_moves_total", "specon_leader",
    "specon_reconcile_errors_total", "specon_migration_source_stuck_total",
    "specon_controller_loop_errors_total", "specon_fenced_writes_total",
}
#: Aliases whose unit changed: old value = new value x this.
SCALED = {"specon_agent_job_growth_per_minute": 60.0,
          "specon_agent_job_growth_efficiency_per_core_minute": 60.0}


def _exercised(owner: Any) -> CollectorRegistry:
    """Give every metric of ``owner`` a sample with a value of its own (so that an alias
    reading the wrong metric shows)."""
    metrics = [m for m in vars(owner).values() if isinstance(m, MetricWrapperBase)]
    for i, metric in enumerate(metrics):
        value = 1.5 + i
        labels = metric._labelnames  # the client library has no public accessor
        child = metric.labels(*[f"v{i}"] * len(labels)) if labels else metric
        if isinstance(child, Gauge):
            child.set(value)
        elif isinstance(child, Counter):
            child.inc(value)
        elif isinstance(child, Histogram):
            child.observe(value)
    registry: CollectorRegistry = owner.registry
    return registry


def _families(owner: Any) -> dict[str, Any]:
    text = generate_latest(_exercised(owner)).decode()
    # The text format shows a counter's or histogram's _created as a gauge of its own.
    return {f.name: f for f in text_string_to_metric_families(text)
            if not f.name.endswith("_created")}


def _exposed(fam: Metric) -> str:
    return fam.name + ("_total" if fam.type == "counter" else "")


def _values(fam: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name[len(fam.name):], tuple(sorted(s.labels.items()))): s.value
            for s in fam.samples if not s.name.endswith("_created")}


@pytest.mark.parametrize(("owner", "prefix"), [(AgentMetrics, "specon_agent_"),
                                                (ManagerMetrics, "specon_manager_")])
def test_every_current_name_follows_the_conventions(owner: type, prefix: str) -> None:
    current = [f for f in _families(owner()).values()
               if not f.documentation.startswith("deprecated:")]
    assert len(current) > 20
    for fam in current:
        name = _exposed(fam)
        assert name.startswith(prefix), name
        assert not NOT_BASE.search(name), f"{name}: not in a base unit"
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), name
        else:
            assert name.endswith(UNITS) or name in UNITLESS, (
                f"{name}: no unit suffix (one of {UNITS}), and not a known count or state")


def test_every_old_name_is_an_alias_with_its_new_names_value() -> None:
    families = {**_families(AgentMetrics()), **_families(ManagerMetrics())}
    aliases = {_exposed(f): f for f in families.values()
               if f.documentation.startswith("deprecated:")}
    assert set(aliases) == PREVIOUS - {_exposed(f) for f in families.values()
                                       if not f.documentation.startswith("deprecated:")}
    for old, fam in aliases.items():
        new = re.fullmatch(r"deprecated: use (\w+); removed in the next release\.",
                           fam.documentation)
        assert new, (old, fam.documentation)
        target = families[new.group(1).removesuffix("_total")]
        assert fam.type == target.type, old
        scale = SCALED.get(old, 1.0)
        expected = {k: v * (scale if k[0] not in ("_bucket", "_count") else 1.0)
                    for k, v in _values(target).items()}
        got = _values(fam)
        assert got.keys() == expected.keys(), old
        assert all(got[k] == pytest.approx(expected[k]) for k in got), (old, got, expected)
        assert any(v != 0 for v in got.values()), f"{old}: exercised but all zero"


def test_an_alias_follows_later_changes_and_a_histogram_is_never_rescaled() -> None:
    registry = CollectorRegistry()
    g = Gauge("x_per_second", "new", ["a"], registry=registry)
    deprecated_alias(registry, g, "x_per_minute", scale=60)
    g.labels("1").set(0.5)
    assert registry.get_sample_value("x_per_minute", {"a": "1"}) == 30.0
    g.labels("1").set(2)
    assert registry.get_sample_value("x_per_minute", {"a": "1"}) == 120.0
    help_ = {f.name: f.documentation for f in registry.collect()}["x_per_minute"]
    assert help_ == DEPRECATED.format(new="x_per_second")
    h = Histogram("y_seconds", "new", registry=registry)
    with pytest.raises(ValueError):
        deprecated_alias(registry, h, "y_minutes", scale=1 / 60)
    with pytest.raises(ValueError):  # the registry refuses a name exported twice
        deprecated_alias(registry, g, "x_per_second")

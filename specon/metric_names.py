"""Renamed Prometheus metrics: the old name stays exported for one release, as an alias.

An alias is a collector that, on each scrape, reads the metric under its new name and exposes
the same samples under the old one (scaled when the unit changed, e.g. per second → per
minute), so the two can never disagree and the code writes only the new metric.
docs/upgrades.md lists each release's renames.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, Summary
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

#: The HELP text every alias carries (the conventions test finds aliases by it).
DEPRECATED = "deprecated: use {new}; removed in the next release."


def family_name(name: str) -> str:
    """The family a sample name belongs to, as the client library names it (no ``_total``)."""
    return name.removesuffix("_total")


@dataclass(frozen=True)
class _Alias:
    metric: MetricWrapperBase
    old: str      # the old family name
    scale: float  # old value = new value x scale

    def _renamed(self, samples: bool) -> Iterator[Metric]:
        for fam in (self.metric.collect() if samples else self.metric.describe()):
            new = fam.name + ("_total" if fam.type == "counter" else "")
            out = Metric(self.old, DEPRECATED.format(new=new), fam.type, fam.unit)
            for s in fam.samples:
                # Histogram buckets and counts are counts of observations, not in the unit.
                scale = 1.0 if s.name.endswith(("_bucket", "_count", "_created")) else self.scale
                out.samples.append(Sample(self.old + s.name[len(fam.name):], s.labels,
                                          s.value * scale, s.timestamp, s.exemplar))
            yield out

    def collect(self) -> Iterable[Metric]:
        return list(self._renamed(samples=True))

    def describe(self) -> Iterable[Metric]:
        return list(self._renamed(samples=False))


def deprecated_alias(registry: CollectorRegistry, metric: MetricWrapperBase, old_name: str,
                     scale: float = 1.0) -> None:
    """Export ``metric`` under ``old_name`` too (value x ``scale``), until the next release.

    ``scale`` only for gauges and counters: a histogram's bucket bounds would need it too."""
    if scale != 1.0 and isinstance(metric, (Histogram, Summary)):
        raise ValueError(f"{old_name}: a histogram or summary alias cannot be rescaled")
    registry.register(_Alias(metric, family_name(old_name), scale))

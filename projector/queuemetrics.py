"""Volcano's queue gauges on a Prometheus endpoint: the edge of ``strata.projector.fold.queuegauges``.

A process that folds the cache log registers one ``VolcanoCollector`` with a callable that
returns its latest snapshot (or None before the first one). Each scrape turns that snapshot's
figures into metric families with Volcano's names, so Volcano's dashboards show Strata's view.
The families are built once per version: scrapes of an unchanged version reuse them, and a
version costs one pass over its PodGroups and tasks however often it is scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.queuegauges import FAMILIES, Sample, queue_figures, samples
from strata.projector.fold.snapshot import Snapshot

LatestSnapshot = Callable[[], Snapshot | None]
_Key = tuple[int, FoldConfig]  # a version identifies a snapshot within one fold's settings


class VolcanoCollector:
    """A custom collector (``REGISTRY.register(VolcanoCollector(latest))``). Thread-safe: the
    cache is one tuple, replaced whole, so a scrape reads a version's families or builds them."""

    def __init__(self, latest: LatestSnapshot) -> None:
        self._latest = latest
        self._cached: tuple[_Key, tuple[Metric, ...]] | None = None

    def describe(self) -> Iterator[Metric]:
        """The families' names, so the registry refuses a second collector of the same names."""
        for family in FAMILIES:
            yield GaugeMetricFamily(family.name, family.help, labels=family.labels)

    def collect(self) -> Iterator[Metric]:
        snapshot = self._latest()
        if snapshot is None:
            return
        yield from self.families(snapshot)

    def families(self, snapshot: Snapshot) -> tuple[Metric, ...]:
        """The snapshot's metric families, built at most once per version."""
        key = (snapshot.version, snapshot.config)
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        built = metric_families(samples(queue_figures(snapshot)))
        self._cached = (key, built)
        return built


def metric_families(all_samples: Iterable[Sample]) -> tuple[Metric, ...]:
    """One GaugeMetricFamily per family of Volcano's, in FAMILIES order, each with its samples
    (a family without samples is still exported: its HELP and TYPE lines say it exists)."""
    built = {family: GaugeMetricFamily(family.name, family.help, labels=family.labels) for family in FAMILIES}
    for sample in all_samples:
        built[sample.family].add_metric(list(sample.labels), sample.value)
    return tuple(built[family] for family in FAMILIES)

"""Prometheus exposition text -> snapshots -> what happened between two of them.

The same arithmetic Prometheus does for `histogram_quantile(0.99, rate(x_bucket[5m]))`: the
difference of two cumulative histograms is the window's histogram, and a quantile is found by
linear interpolation inside the bucket that holds it. Pure: no I/O, no Ray.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs, `le` removed


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts: `buckets` are (upper bound, count <= bound), bounds ascending,
    the last +Inf."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, earlier: "Histogram") -> "Histogram":
        """This histogram less an earlier one of the same series: the window between them."""
        if not earlier.buckets:
            return self
        before = dict(earlier.buckets)
        return Histogram(tuple((b, c - before.get(b, 0.0)) for b, c in self.buckets),
                         self.count - earlier.count, self.sum - earlier.sum)

    def plus(self, other: "Histogram") -> "Histogram":
        if not self.buckets:
            return other
        theirs = dict(other.buckets)
        return Histogram(tuple((b, c + theirs.get(b, 0.0)) for b, c in self.buckets),
                         self.count + other.count, self.sum + other.sum)

    def quantile(self, q: float) -> float | None:
        """Prometheus's histogram_quantile: None without observations; a quantile in the +Inf
        bucket is the largest finite bound."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, count in self.buckets:
            if count >= rank:
                if math.isinf(bound):
                    return lower_bound
                if count == lower_count:
                    return bound
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
            lower_bound, lower_count = bound, count
        return lower_bound


EMPTY = Histogram((), 0.0, 0.0)


@dataclass(frozen=True)
class Snapshot:
    """One scrape: histograms and plain samples (gauges, counters) by series."""

    t: float
    histograms: dict[str, dict[Labels, Histogram]] = field(default_factory=dict)
    values: dict[str, dict[Labels, float]] = field(default_factory=dict)

    def histogram(self, name: str, **labels: str) -> Histogram:
        """The sum of every series of `name` whose labels include `labels`."""
        total = EMPTY
        for series, h in self.histograms.get(name, {}).items():
            if _matches(series, labels):
                total = total.plus(h)
        return total

    def samples(self, name: str, **labels: str) -> dict[Labels, float]:
        return {s: v for s, v in self.values.get(name, {}).items() if _matches(s, labels)}

    def total(self, name: str, **labels: str) -> float:
        return sum(self.samples(name, **labels).values())


def _matches(series: Labels, wanted: dict[str, str]) -> bool:
    have = dict(series)
    return all(have.get(k) == v for k, v in wanted.items())


def parse_snapshot(text: str, t: float) -> Snapshot:
    """Parse Prometheus text exposition taken at time `t` (seconds)."""
    histograms: dict[str, dict[Labels, Histogram]] = {}
    values: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            histograms[family.name] = _histograms(family.name, family.samples)
        else:
            for s in family.samples:
                if not s.name.endswith("_created"):
                    values.setdefault(s.name, {})[_labels(s.labels)] = s.value
    return Snapshot(t, histograms, values)


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _histograms(name: str, samples: Iterable) -> dict[Labels, Histogram]:
    buckets: dict[Labels, list[tuple[float, float]]] = {}
    counts: dict[Labels, float] = {}
    sums: dict[Labels, float] = {}
    for s in samples:
        key = _labels(s.labels)
        if s.name == name + "_bucket":
            buckets.setdefault(key, []).append((float(s.labels["le"]), s.value))
        elif s.name == name + "_count":
            counts[key] = s.value
        elif s.name == name + "_sum":
            sums[key] = s.value
    return {key: Histogram(tuple(sorted(b)), counts.get(key, 0.0), sums.get(key, 0.0))
            for key, b in buckets.items()}

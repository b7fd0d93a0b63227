"""The rows behind ``tether metrics``: counters and latency histograms, written in the
caller's transaction.

An owner keeps its metric changes in memory (:class:`tether.metrics.Deferred`) and its
status writer hands them over with its next write, a few per turn. Each write here is
one statement per counter and per histogram whatever the number of changes: changes to
one series are merged first, and a histogram's buckets are added to in SQL
(``json_set``), with no read of the row and no JSON decoding in Python -- that
read-modify-write per observation was ~45 % of an owner's status-writer thread.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.metrics import MetricOp

__all__ = ["apply_metric_ops", "label_text"]


def label_text(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class _Histogram:
    """Observations of one series to add: how many, their sum, and per bucket."""

    __slots__ = ("bounds", "count", "per_bucket", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.count = 0
        self.sum = 0.0
        self.per_bucket: dict[int, int] = {}

    def add(self, value: float) -> None:
        index = next((i for i, edge in enumerate(self.bounds) if value <= edge), len(self.bounds))
        self.count += 1
        self.sum += value
        self.per_bucket[index] = self.per_bucket.get(index, 0) + 1


def apply_metric_ops(db: sqlite3.Connection, ops: Iterable[MetricOp]) -> None:
    """Write kept metric changes (:class:`tether.metrics.Deferred`) in the caller's
    transaction: each counter and each histogram once."""
    counters: dict[tuple[str, str], int] = {}
    histograms: dict[tuple[str, str], _Histogram] = {}
    for kind, name, value, bounds, labels in ops:
        key = (name, label_text(labels))
        if kind == "observe" and bounds is not None:
            series = histograms.get(key)
            if series is None or series.bounds != bounds:
                if series is not None:  # the same series with other buckets: write it first
                    _add_observations(db, key, series)
                series = histograms[key] = _Histogram(bounds)
            series.add(value)
        elif kind == "incr":
            counters[key] = counters.get(key, 0) + int(value)
    for key, by in counters.items():
        db.execute(
            "INSERT INTO counters (name, labels, value) VALUES (?, ?, ?)"
            " ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value",
            (*key, by),
        )
    for key, series in histograms.items():
        _add_observations(db, key, series)


def _add_observations(db: sqlite3.Connection, key: tuple[str, str], series: _Histogram) -> None:
    """One statement: a new row, or the observations added to the stored one. A stored
    row whose buckets are not as many as ``series`` has (its bounds changed) starts
    its buckets over from these observations; its count and sum go on."""
    fresh = [0] * (len(series.bounds) + 1)
    for index, n in series.per_bucket.items():
        fresh[index] = n
    # Paths and increments are our own integers: written into the statement's text.
    paths = ", ".join(
        f"'$[{i}]', json_extract(buckets, '$[{i}]') + {n}"
        for i, n in sorted(series.per_bucket.items())
    )
    db.execute(
        # The text holds only integers computed here; the values are parameters.
        "INSERT INTO histograms (name, labels, count, sum, buckets) VALUES (?, ?, ?, ?, ?)"  # noqa: S608
        " ON CONFLICT (name, labels) DO UPDATE SET count = count + excluded.count,"
        " sum = sum + excluded.sum, buckets = CASE"
        f" WHEN json_valid(buckets) AND json_array_length(buckets) = {len(fresh)}"
        f" THEN json_set(buckets, {paths}) ELSE excluded.buckets END",
        (*key, series.count, series.sum, json.dumps(fresh, separators=(",", ":"))),
    )

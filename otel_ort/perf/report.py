"""A counted run's numbers as span attributes and Chrome-trace counter tracks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort.perf.counting import RunCounts

_MAX_PROBLEM = 256


def node_attributes(counts: RunCounts) -> list[dict[str, AttributeValue]]:
    """Per node (in window order): ``perf.<alias>``, the per-thread split when several threads
    worked on it, and the aliases that were not counted."""
    out = []
    for values, threads in zip(counts.attribution.nodes, counts.attribution.threads, strict=True):
        attributes: dict[str, AttributeValue] = {}
        missing = []
        for alias, value in values.items():
            if math.isnan(value):
                missing.append(alias)
            else:
                attributes[semconv.PERF_PREFIX + alias] = round(value)
        if missing:
            attributes[semconv.PERF_NOT_COUNTED] = missing
        if len(threads) > 1:
            tids = sorted(threads)
            attributes[semconv.PERF_THREAD_IDS] = tids
            for alias in values:
                split = [threads[tid].get(alias, math.nan) for tid in tids]
                if not any(math.isnan(value) for value in split):
                    key = semconv.PERF_PREFIX + alias + semconv.PERF_BY_THREAD_SUFFIX
                    attributes[key] = [round(value) for value in split]
        out.append(attributes)
    return out


def run_attributes(counts: RunCounts, unavailable: Sequence[str]) -> dict[str, AttributeValue]:
    """Run totals, what fell between nodes or could not be placed, and how it was counted."""
    attribution = counts.attribution
    attributes: dict[str, AttributeValue] = {
        semconv.PERF_SAMPLE_PERIOD_NS: counts.period_ns,
        semconv.PERF_THREADS: counts.threads,
    }
    for prefix, values in (
        (semconv.PERF_PREFIX, attribution.totals),
        (semconv.PERF_BETWEEN_PREFIX, attribution.between),
        (semconv.PERF_UNATTRIBUTED_PREFIX, attribution.unattributed),
    ):
        for alias, value in values.items():
            if not math.isnan(value) and (value or prefix != semconv.PERF_UNATTRIBUTED_PREFIX):
                attributes[prefix + alias] = round(value)
    for alias, (enabled, running) in attribution.scaling.items():
        if running and enabled != running:
            attributes[semconv.PERF_SCALING_PREFIX + alias] = round(enabled / running, 4)
    never_ran = [alias for alias, value in attribution.totals.items() if math.isnan(value)]
    if never_ran:
        attributes[semconv.PERF_NOT_COUNTED] = never_ran
    if counts.throttled:
        attributes[semconv.PERF_THROTTLED] = counts.throttled
    problems = [*unavailable, *counts.problems]
    if problems:
        attributes[semconv.PERF_UNAVAILABLE] = [line[:_MAX_PROBLEM] for line in problems]
    return attributes


def counter_events(
    counts: RunCounts, windows_us: Sequence[tuple[float, float]], pid: int
) -> list[dict[str, Any]]:
    """Chrome counter tracks (``"ph": "C"``), one per alias: the node's count from its start
    to its end, 0 between nodes."""
    events: list[dict[str, Any]] = []
    for values, (start, end) in zip(counts.attribution.nodes, windows_us, strict=True):
        for alias, value in values.items():
            if math.isnan(value):
                continue
            name = semconv.PERF_PREFIX + alias
            events.append(_counter(name, start, pid, alias, round(value)))
            events.append(_counter(name, end, pid, alias, 0))
    return events


def _counter(name: str, ts: float, pid: int, alias: str, value: int) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "C",
        "ts": ts,
        "pid": pid,
        "tid": 0,
        "cat": "perf",
        "args": {alias: value},
    }

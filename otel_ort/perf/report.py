"""A counted run's numbers as span attributes and, in its profile, as counter tracks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import isnan
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort.perf.counting import PerfCounters, RawRun, RunCounts
from otel_ort.perf.tracks import counter_events
from otel_ort.profiles.records import Profile

_MAX_PROBLEM = 256


@dataclass(frozen=True)
class ProfileCounts:
    """A counted run's attributes: the run span's, and each node span's."""

    run: dict[str, AttributeValue]
    nodes: list[dict[str, AttributeValue]]
    """In the order of the run's nodes; empty when counted per run only."""
    problems: tuple[str, ...]
    """What this run's counts lack (also in the run's ``perf.unavailable``, after the events
    that are never counted here)."""
    tracks: Callable[[], list[dict[str, Any]]] = field(default=list)
    """The counter tracks' events, made when called: the caller adds them to the kept file
    (the worker, with the garbage collector paused, just before writing it)."""


def count_profile(perf: PerfCounters, profile: Profile, raw: RawRun) -> ProfileCounts:
    """Attribute ``raw`` to the nodes of ``profile``'s one run and move its start to where the
    counts place the run (``RunCounts.late_ns``); the counter tracks are made on demand
    (``ProfileCounts.tracks``)."""
    windows_us = [(node.ts, node.end) for node in profile.runs[0].nodes]
    problems: list[str] = []
    # the parallel executor's nodes overlap: counts per run only (a control-flow node holding
    # its subgraph's nodes is nesting, not overlap)
    if _overlapping(windows_us):
        windows_us = []
        problems.append("nodes ran concurrently (parallel execution): counts per run only")
    base = profile.start_ns
    windows = [(base + int(start * 1000), base + int(end * 1000)) for start, end in windows_us]
    counts = perf.attribute(raw, windows)
    profile.start_ns += counts.late_ns  # the spans and the kept file start there too
    pid = next((e["pid"] for e in profile.events if isinstance(e, dict) and "pid" in e), 0)

    def tracks() -> list[dict[str, Any]]:
        return counter_events(counts, windows_us, pid)

    nodes = node_attributes(counts) if windows else []
    run = run_attributes(counts, [*perf.unavailable_events, *problems])
    return ProfileCounts(run, nodes, (*problems, *counts.problems), tracks)


def _overlapping(windows: list[tuple[float, float]]) -> bool:
    """Whether two windows overlap without one holding the other (ORT's whole µs: edges may
    cross by 1 µs)."""
    open_ends: list[float] = []  # the ends of the windows holding the current one
    for start, end in sorted(windows, key=lambda window: (window[0], -window[1])):
        while open_ends and open_ends[-1] <= start + 1:
            open_ends.pop()
        if open_ends and end > open_ends[-1] + 1:
            return True
        open_ends.append(end)
    return False


def node_attributes(counts: RunCounts) -> list[dict[str, AttributeValue]]:
    """Per node (in window order): ``perf.<alias>``, the per-thread split when several threads
    worked on it, and the aliases that were not counted."""
    out = []
    keys: dict[str, tuple[str, str]] = {}  # alias -> its attribute and its by-thread attribute
    for values, threads in zip(counts.attribution.nodes, counts.attribution.threads, strict=True):
        attributes: dict[str, AttributeValue] = {}
        missing = []
        for alias, value in values.items():
            if isnan(value):  # not counted during this node
                missing.append(alias)
            else:
                key = keys.get(alias) or keys.setdefault(alias, _keys(alias))
                attributes[key[0]] = round(value)
        if missing:
            attributes[semconv.PERF_NOT_COUNTED] = missing
        if len(threads) > 1:
            tids = sorted(threads)
            attributes[semconv.PERF_THREAD_IDS] = tids
            per_thread = [threads[tid] for tid in tids]
            for alias in values:
                split = [each.get(alias, math.nan) for each in per_thread]
                if not any(isnan(value) for value in split):
                    key = keys.get(alias) or keys.setdefault(alias, _keys(alias))
                    attributes[key[1]] = [round(value) for value in split]
        out.append(attributes)
    return out


def _keys(alias: str) -> tuple[str, str]:
    name = semconv.PERF_PREFIX + alias
    return name, name + semconv.PERF_BY_THREAD_SUFFIX


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

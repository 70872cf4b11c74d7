"""A counted run's numbers as span attributes and, in its profile, as counter tracks."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import isnan
from typing import Any

import numpy as np
import numpy.typing as npt
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort._util.native import NATIVE_WANTED
from otel_ort.perf.attribution import Attribution, NodeColumns, as_ints
from otel_ort.perf.counting import RunCounts, SettledRun
from otel_ort.perf.tracks import counter_events, counter_text
from otel_ort.profiles.chrome import EventText
from otel_ort.profiles.records import Profile

try:
    from otel_ort.perf import _node_counts
except ImportError:  # not built at install: the node attributes are made here
    _node_counts = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _node_counts = None  # type: ignore[assignment]

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
    """The counter tracks' events, made when called (``otel-ort profile`` adds them to the
    profile's events, for its tables and its kept file)."""
    track_text: Callable[[], EventText | None] = field(default=lambda: None)
    """The same events as JSON text, written when called: the worker adds them to the kept
    file (with the garbage collector paused, just before writing it)."""


def count_profile(counted: SettledRun, profile: Profile) -> ProfileCounts:
    """Attribute ``counted`` to the nodes of ``profile``'s one run and move its start to where the
    counts place the run (``RunCounts.late_ns``); the counter tracks are made on demand
    (``ProfileCounts.tracks``)."""
    windows_us = [(node.ts, node.end) for node in profile.runs[0].nodes]
    flat = itertools.chain.from_iterable(windows_us)
    us = np.fromiter(flat, np.float64, 2 * len(windows_us)).reshape(-1, 2)
    problems: list[str] = []
    # the parallel executor's nodes overlap: counts per run only (a control-flow node holding
    # its subgraph's nodes is nesting, not overlap)
    if not _apart(us) and _overlapping(windows_us):
        windows_us = []
        us = us[:0]
        problems.append("nodes ran concurrently (parallel execution): counts per run only")
    windows = profile.start_ns + (us * 1000).astype(np.int64)  # as int(µs * 1000), ns
    counts = counted.attribute(windows)
    profile.start_ns += counts.late_ns  # the spans and the kept file start there too
    pid = next((pid for pid in map(_pid, profile.events) if pid is not None), 0)

    def tracks() -> list[dict[str, Any]]:
        return counter_events(counts, windows_us, pid)

    def track_text() -> EventText:
        return EventText(pid, counter_text(counts, windows_us, pid))

    nodes = node_attributes(counts) if len(windows) else []
    run = run_attributes(counts, [*counted.unavailable_events, *problems])
    return ProfileCounts(run, nodes, (*problems, *counts.problems), tracks, track_text)


def _pid(event: Any) -> Any:
    """An event's ``pid``: a dict's key, or a typed event's field (``None``: it has none)."""
    return event.get("pid") if isinstance(event, dict) else getattr(event, "pid", None)


def _apart(us: npt.NDArray[np.float64]) -> bool:
    """Whether no window starts before one started earlier ends (ORT's whole µs: by more than
    1 µs): then none overlaps another (``_overlapping``'s quick answer, a run's usual one)."""
    if len(us) < 2:
        return True
    ordered = us[np.lexsort((-us[:, 1], us[:, 0]))]
    reach = np.maximum.accumulate(ordered[:-1, 1])  # the latest end of the windows before
    return bool((ordered[1:, 0] + 1 >= reach).all())


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
    attribution = counts.attribution
    columns = attribution.columns
    if columns is None or len({thread.tid for thread in columns.threads}) < len(columns.threads):
        return [_node(*node) for node in zip(attribution.nodes, attribution.threads, strict=True)]
    return _from_columns(attribution, columns)


def _from_columns(
    attribution: Attribution, columns: NodeColumns
) -> list[dict[str, AttributeValue]]:
    """``node_attributes`` from the arrays ``attribute`` made: the same, a column at a time
    (nodes with an alias not counted, rare, one at a time)."""
    aliases = columns.aliases
    if not aliases:
        return [{} for _ in range(columns.nodes)]
    threads = sorted(columns.threads, key=lambda thread: thread.tid)
    ints = as_ints(  # rows: the totals, then each thread's values, alias by alias
        np.stack(
            [columns.values[alias] for alias in aliases]
            + [thread.values[alias] for thread in threads for alias in aliases]
        )
    )
    if ints is None:  # inf or huge values: rounded one by one
        return [_node(*node) for node in zip(attribution.nodes, attribution.threads, strict=True)]
    keys = [_keys(alias) for alias in aliases]
    value_keys = [key[0] for key in keys]
    split_keys = [key[1] for key in keys]
    uncounted = np.zeros(columns.nodes, dtype=bool)  # a NaN total: a NaN on some thread too
    for alias in aliases:
        uncounted |= np.isnan(columns.values[alias])
    on_cpu = np.array([thread.on_cpu for thread in threads], dtype=bool).reshape(len(threads), -1)
    on_cpu[:, on_cpu.sum(axis=0) < 2] = False  # a node's split: only when several threads
    tids = tuple(thread.tid for thread in threads)
    if _node_counts is not None:  # in C where it was built: the same dicts
        made = _node_counts.node_dicts(
            tuple(value_keys), tuple(split_keys), semconv.PERF_THREAD_IDS, tids, ints, on_cpu,
            uncounted,
        )  # fmt: skip
    else:
        made = _dicts(value_keys, split_keys, tids, ints, on_cpu, uncounted)
    for index in np.flatnonzero(uncounted).tolist():
        made[index] = _node(attribution.nodes[index], attribution.threads[index])
    return made


def _dicts(
    value_keys: list[str],
    split_keys: list[str],
    tids: tuple[int, ...],
    ints: npt.NDArray[np.int64],
    on_cpu: npt.NDArray[np.bool_],
    uncounted: npt.NDArray[np.bool_],
) -> list[Any]:
    """``_from_columns``'s dicts, a set of threads at a time (``None`` where uncounted)."""
    width = len(value_keys)
    counted = np.flatnonzero(~uncounted)
    counted = counted[np.lexsort(on_cpu[:, counted])]  # the nodes of each set of threads together
    sets = on_cpu[:, counted]
    new_set = np.flatnonzero((sets[:, 1:] != sets[:, :-1]).any(axis=0)) + 1
    out: list[Any] = [None] * len(uncounted)  # each counted one replaced
    for first, indices in zip([0, *new_set.tolist()], np.split(counted, new_set), strict=True):
        members = np.flatnonzero(sets[:, first]).tolist() if len(indices) else []
        chosen = ints[:, indices]
        if not members:  # the usual set: no split by thread, a row per node
            for index, values in zip(indices.tolist(), chosen[:width].T.tolist(), strict=True):
                out[index] = dict(zip(value_keys, values, strict=True))
            continue
        rows: list[list[Any]] = chosen[:width].tolist()  # several threads: their split too
        member_tids = [tids[at] for at in members]
        rows.append([list(member_tids) for _ in indices])
        rows += [
            chosen[[width * (1 + at) + column for at in members]].T.tolist()
            for column in range(width)
        ]
        names = [*value_keys, semconv.PERF_THREAD_IDS, *split_keys]
        for index, row in zip(indices.tolist(), zip(*rows, strict=False), strict=False):
            out[index] = dict(zip(names, row, strict=False))
    return out


def _node(
    values: dict[str, float], threads: dict[int, dict[str, float]]
) -> dict[str, AttributeValue]:
    """One node's attributes from its value per alias and its threads' values."""
    attributes: dict[str, AttributeValue] = {}
    missing = []
    for alias, value in values.items():
        if isnan(value):  # not counted during this node
            missing.append(alias)
        else:
            attributes[semconv.PERF_PREFIX + alias] = round(value)
    if missing:
        attributes[semconv.PERF_NOT_COUNTED] = missing
    if len(threads) > 1:
        tids = sorted(threads)
        attributes[semconv.PERF_THREAD_IDS] = tids
        per_thread = [threads[tid] for tid in tids]
        for alias in values:
            split = [each.get(alias, math.nan) for each in per_thread]
            if not any(isnan(value) for value in split):
                attributes[_keys(alias)[1]] = [round(value) for value in split]
    return attributes


def _keys(alias: str) -> tuple[str, str]:
    name = semconv.PERF_PREFIX + alias
    return name, name + semconv.PERF_BY_THREAD_SUFFIX


def run_attributes(counts: RunCounts, unavailable: Sequence[str]) -> dict[str, AttributeValue]:
    """Run totals, what fell between nodes, and how it was counted."""
    attribution = counts.attribution
    attributes: dict[str, AttributeValue] = {
        semconv.PERF_SAMPLE_PERIOD_NS: counts.period_ns,
        semconv.PERF_THREADS: counts.threads,
    }
    for prefix, values in (
        (semconv.PERF_PREFIX, attribution.totals),
        (semconv.PERF_BETWEEN_PREFIX, attribution.between),
    ):
        for alias, value in values.items():
            if not math.isnan(value):
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

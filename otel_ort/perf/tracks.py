"""perf counts in a Chrome trace: one counter track (``"ph": "C"``) per event alias, the
node's count at the node's start and 0 at its end; written into kept profiles, read back by
the summary tables and the HTML report."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import isnan
from typing import Any

import orjson

from otel_ort import semconv
from otel_ort._util.native import NATIVE_WANTED
from otel_ort.perf.attribution import rounded
from otel_ort.perf.counting import RunCounts
from otel_ort.profiles import chrome
from otel_ort.profiles.records import NodeRecord

try:
    from otel_ort.perf import _track_text
except ImportError:  # not built at install: the events are made in Python
    _track_text = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _track_text = None  # type: ignore[assignment]


def counter_text(counts: RunCounts, windows_us: Sequence[tuple[float, float]], pid: int) -> bytes:
    """:func:`counter_events` as JSON text, the events joined by commas (what a kept file's
    ``traceEvents`` holds). Written in C (``_track_text``) where it was built and the values
    are its kind; else each event is made and encoded here."""
    columns = counts.attribution.columns
    if _track_text is not None and columns is not None and columns.nodes == len(windows_us):
        pid_text = orjson.dumps(pid).decode()
        templates = [
            (
                b'{"name":' + orjson.dumps(semconv.PERF_PREFIX + alias) + b',"ph":"C","ts":',
                f',"pid":{pid_text},"tid":0,"cat":"perf","args":{{'.encode()
                + orjson.dumps(alias)
                + b":",
            )
            for alias in columns.aliases
        ]
        rows = [rounded(columns.values[alias]) for alias in columns.aliases]
        starts = [start for start, _ in windows_us]
        text = _track_text.counter_text(templates, starts, _stops(windows_us), rows)
        if text is not NotImplemented:
            return text
    return b",".join(map(chrome.dumps, counter_events(counts, windows_us, pid)))


def counter_events(
    counts: RunCounts, windows_us: Sequence[tuple[float, float]], pid: int
) -> list[dict[str, Any]]:
    """Chrome counter tracks (``"ph": "C"``), one per alias: the node's count from its start
    to its end, 0 between nodes. ``windows_us`` are in order of start; a node's 0 comes no
    later than the next node's start (ORT's whole-µs times may overlap by 1 µs), so that a
    viewer, which sorts the samples by time, never ends the next node's count early."""
    stops = _stops(windows_us)
    columns = counts.attribution.columns
    if columns is None:
        return _from_dicts(counts, windows_us, stops, pid)
    if columns.nodes != len(windows_us):
        raise ValueError(f"{columns.nodes} nodes counted but {len(windows_us)} windows given")
    templates = [
        (alias,
         {"name": semconv.PERF_PREFIX + alias, "ph": "C", "ts": 0.0, "pid": pid, "tid": 0,
          "cat": "perf", "args": None})
        for alias in columns.aliases
    ]  # fmt: skip
    rows = zip(*(rounded(columns.values[alias]) for alias in columns.aliases), strict=True)
    events: list[dict[str, Any]] = []
    append = events.append  # about 2,500 events a run of 400 nodes: the loop is kept lean
    for (start, _), stop, row in zip(windows_us, stops, rows, strict=False):
        for (alias, template), value in zip(templates, row, strict=False):
            if value is None:  # not counted during this node
                continue
            event = template.copy()  # a copy then two stores: cheaper than a dict display
            event["ts"] = start
            event["args"] = {alias: value}
            append(event)
            event = template.copy()
            event["ts"] = stop
            event["args"] = {alias: 0}
            append(event)
    return events


def _stops(windows_us: Sequence[tuple[float, float]]) -> list[float]:
    """Where each node's count drops to 0: its end, or the next node's start if earlier."""
    starts = [start for start, _ in windows_us[1:]] + [math.inf] if windows_us else []
    return [
        end if end < next_start else next_start
        for (_, end), next_start in zip(windows_us, starts, strict=True)
    ]


def _from_dicts(
    counts: RunCounts,
    windows_us: Sequence[tuple[float, float]],
    stops: list[float],
    pid: int,
) -> list[dict[str, Any]]:
    """``counter_events`` from per-node dicts."""
    events: list[dict[str, Any]] = []
    append = events.append
    names: dict[str, str] = {}
    for values, (start, _), stop in zip(counts.attribution.nodes, windows_us, stops, strict=True):
        for alias, value in values.items():
            if isnan(value):  # not counted during this node
                continue
            name = names.get(alias) or names.setdefault(alias, semconv.PERF_PREFIX + alias)
            append(
                {"name": name, "ph": "C", "ts": start, "pid": pid, "tid": 0, "cat": "perf",
                 "args": {alias: round(value)}}
            )  # fmt: skip
            append(
                {"name": name, "ph": "C", "ts": stop, "pid": pid, "tid": 0, "cat": "perf",
                 "args": {alias: 0}}
            )  # fmt: skip
    return events


@dataclass
class Counters:
    """The perf counts a kept profile holds: per alias, (node start, count) in file order."""

    aliases: list[str] = field(default_factory=list)
    """In the order the file first names them."""
    starts: dict[str, list[tuple[float, int | float]]] = field(default_factory=dict)

    def for_nodes(self, nodes: Sequence[NodeRecord]) -> list[dict[str, int | float] | None]:
        """Each node's counts (``None``: none written), found by the node's start; nodes
        starting at the same µs take theirs in file order, which is the nodes' order."""
        queues: dict[str, dict[float, deque[int | float]]] = {}
        for alias, samples in self.starts.items():
            by_start = queues[alias] = defaultdict(deque)
            for start, value in samples:
                by_start[start].append(value)
        found: list[dict[str, int | float] | None] = []
        for node in nodes:
            values = {
                alias: by_start[node.ts].popleft()
                for alias, by_start in queues.items()
                if by_start.get(node.ts)
            }
            found.append(values or None)
        return found


def counters(events: Sequence[Any]) -> Counters:
    """The perf counter tracks otel-ort wrote: per alias, samples in file order pair up as
    (node start, count) then (node end, 0). Values that are not finite numbers (a file
    edited elsewhere) are left out."""
    tracks: dict[str, list[tuple[float, int | float]]] = {}
    for event in events:
        if not (isinstance(event, dict) and event.get("ph") == "C"):
            continue
        name, args, ts = event.get("name"), event.get("args"), event.get("ts")
        if not (isinstance(name, str) and name.startswith(semconv.PERF_PREFIX)):
            continue
        alias = name[len(semconv.PERF_PREFIX) :]
        value = args.get(alias) if isinstance(args, dict) else None
        if type(ts) in (int, float) and type(value) in (int, float):
            tracks.setdefault(alias, []).append((ts, value))  # type: ignore[arg-type]
    result = Counters(aliases=list(tracks))
    for alias, samples in tracks.items():
        pairs = [pair for pair in samples[::2] if math.isfinite(pair[1])]
        result.starts[alias] = pairs
    return result

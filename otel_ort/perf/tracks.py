"""perf counts in a Chrome trace: one counter track (``"ph": "C"``) per event alias, the
node's count at the node's start and 0 at its end; written into kept profiles, read back by
the summary tables and the HTML report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_ort import semconv
from otel_ort.perf.counting import RunCounts


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


@dataclass
class Counters:
    """perf counts per node window: ``values[(start, end)][alias]``."""

    aliases: list[str] = field(default_factory=list)
    """In the order the file first names them."""
    values: dict[tuple[float, float], dict[str, int | float]] = field(default_factory=dict)

    def of(self, start: float, end: float) -> dict[str, int | float] | None:
        return self.values.get((start, end))


def counters(events: Sequence[Any]) -> Counters:
    """The perf counter tracks otel-ort wrote: per alias, samples in file order pair up as
    (node start, count) then (node end, 0)."""
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
        for (start, value), (end, _) in zip(samples[::2], samples[1::2], strict=False):
            result.values.setdefault((start, end), {})[alias] = value
    return result

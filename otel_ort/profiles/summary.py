"""Where a profile's time went, as tables: top nodes, per op type, per provider, and, when
otel-ort's perf counters are in the file, the counts per op type and of the top nodes."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from otel_ort import semconv
from otel_ort.cli.tables import format_table, printable
from otel_ort.perf.tracks import counters
from otel_ort.profiles.records import NodeRecord, Profile, holders

K = TypeVar("K")

Counts = dict[int, dict[str, float]]
"""perf counts per node: ``id(node)`` → alias → count."""
_IPC_INSTRUCTIONS, _IPC_CYCLES = " ipc instructions", " ipc cycles"  # no alias has a space


def summarize(profiles: Sequence[Profile], top: int = 15, title: str | None = None) -> str:
    """Tables over all runs of ``profiles``; shares are of the runs' total wall time.
    ``title``: what the first line names (default: the first profile's path)."""
    runs = [run for profile in profiles for run in profile.runs]
    nodes = [node for run in runs for node in run.nodes]
    run_total = sum(run.dur for run in runs)
    named = title or (profiles[0].path if profiles else "no profile")
    lines = [
        f"{printable(named)}: {len(runs)} run(s), {len(nodes)} node executions, "
        f"mean run {run_total / max(len(runs), 1) / 1000:.3f} ms"
    ]
    if any(profile.truncated for profile in profiles):
        lines[0] += "  (file truncated: complete events only)"
    incomplete = sum(not run.complete for run in runs)
    if incomplete:
        lines[0] += f"  ({incomplete} run(s) incomplete: the file ends before they do)"
    if not nodes:
        lines.append("no node events in these runs")
        return "\n".join(lines)
    own = [time for run in runs for time in self_times(run.nodes)]
    nested = any(time != node.dur for node, time in zip(nodes, own, strict=True))
    if nested:
        lines.append(
            "self: a node's time outside the nodes it holds (a Loop, If or Scan holds its "
            "subgraphs' nodes, which have rows of their own); shares are of self time"
        )
    if run_total and sum(own) > run_total * 1.001:
        lines.append("nodes ran in parallel: the shares add up to more than 100% of the runs")
    table = partial(_grouped, nodes, own, run_total=run_total, with_self=nested)
    sections = [
        "\n".join(lines),
        f"Top {top} nodes by total time",
        table(lambda n: (n.name, n.op_type, n.provider), ("node", "op type", "provider"), top),
        "Per op type",
        table(lambda n: (n.op_type,), ("op type",)),
        "Per provider",
        table(lambda n: (n.provider,), ("provider",)),
    ]
    aliases, counts = _perf_counts(profiles)
    if aliases:
        by = next((alias for alias in aliases if alias in semconv.PERF_TIME_ALIASES), aliases[0])
        sections += [
            "perf counters per op type (totals over all runs; times are CPU time summed over "
            "ORT's threads, its spinning pool included, so they can exceed the wall time)",
            _perf_grouped(nodes, counts, aliases, lambda n: (n.op_type,), ("op type",)),
            f"perf counters, top {top} nodes by {by}",
            _perf_grouped(
                nodes, counts, aliases, lambda n: (n.name, n.op_type), ("node", "op type"), top, by
            ),
        ]
    return "\n\n".join(sections)


def self_times(nodes: Sequence[NodeRecord]) -> list[float]:
    """Each node's µs outside the nodes it holds (``holders``)."""
    own = [node.dur for node in nodes]
    for node, holder in zip(nodes, holders(nodes), strict=True):
        if holder is not None:
            own[holder] = max(own[holder] - node.dur, 0.0)
    return own


def totals_by(
    nodes: Sequence[NodeRecord], own: Sequence[float], key: Callable[[NodeRecord], K]
) -> list[tuple[K, int, float, float]]:
    """(key, node count, total µs, self µs) per distinct ``key``, largest self time first;
    ``own``: the nodes' self times (``self_times``, run by run)."""
    count: dict[K, int] = defaultdict(int)
    total: dict[K, float] = defaultdict(float)
    self_total: dict[K, float] = defaultdict(float)
    for node, self_time in zip(nodes, own, strict=True):
        k = key(node)
        count[k] += 1
        total[k] += node.dur
        self_total[k] += self_time
    order = sorted(self_total, key=lambda k: -self_total[k])
    return [(k, count[k], total[k], self_total[k]) for k in order]


def _grouped(
    nodes: Sequence[NodeRecord],
    own: Sequence[float],
    key: Callable[[NodeRecord], tuple[str, ...]],
    labels: tuple[str, ...],
    top: int | None = None,
    *,
    run_total: float,
    with_self: bool,
) -> str:
    """A row per ``key``: count, total and self ms, mean µs and the share of the runs' wall
    time (self time: nested nodes are not counted twice). ``top``: the longest totals only."""
    rows = [
        (*labels, "count", "total ms", *(["self ms"] if with_self else []), "mean us", "% of runs")
    ]
    totals = totals_by(nodes, own, key)
    if top is not None:
        totals = sorted(totals, key=lambda row: -row[2])[:top]
    for k, count, total, self_total in totals:
        rows.append(
            (
                *k,
                str(count),
                f"{total / 1000:.3f}",
                *([f"{self_total / 1000:.3f}"] if with_self else []),
                f"{total / count:.1f}",
                f"{100 * self_total / run_total:.1f}" if run_total else "-",
            )
        )
    return format_table(rows)


def _perf_counts(profiles: Sequence[Profile]) -> tuple[list[str], Counts]:
    """The aliases counted in any of ``profiles`` (in order of appearance), and each node's
    counts (read per profile: node windows repeat from one run's file to the next)."""
    aliases: list[str] = []
    counts: Counts = {}
    for profile in profiles:
        found = counters(profile.events)
        aliases += [alias for alias in found.aliases if alias not in aliases]
        for run in profile.runs:
            for node, values in zip(run.nodes, found.for_nodes(run.nodes), strict=True):
                if values:
                    counts[id(node)] = {alias: float(value) for alias, value in values.items()}
    return aliases, counts


def _perf_grouped(
    nodes: list[NodeRecord],
    counts: Counts,
    aliases: list[str],
    key: Callable[[NodeRecord], tuple[str, ...]],
    labels: tuple[str, ...],
    top: int | None = None,
    by: str | None = None,
) -> str:
    """A row per ``key`` of the counted nodes: executions, each alias's total (time aliases
    in ms), and instructions per cycle (of the nodes that counted both) when both were
    counted; the largest ``by`` first."""
    executions: dict[tuple[str, ...], int] = defaultdict(int)
    totals: dict[tuple[str, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for node in nodes:
        values = counts.get(id(node))
        if values is None:
            continue
        k = key(node)
        executions[k] += 1
        for alias, value in values.items():
            totals[k][alias] += value
        if "instructions" in values and "cycles" in values:
            totals[k][_IPC_INSTRUCTIONS] += values["instructions"]
            totals[k][_IPC_CYCLES] += values["cycles"]
    order = sorted(totals, key=lambda k: -totals[k].get(by or aliases[0], -math.inf))
    ipc = "instructions" in aliases and "cycles" in aliases
    header = [f"{alias} ms" if alias in semconv.PERF_TIME_ALIASES else alias for alias in aliases]
    rows = [(*labels, "count", *header, *(["IPC"] if ipc else []))]
    for k in order[:top]:
        values = totals[k]
        cells = [_count_text(alias, values.get(alias)) for alias in aliases]
        if ipc:
            cycles = values.get(_IPC_CYCLES)
            cells.append(f"{values[_IPC_INSTRUCTIONS] / cycles:.2f}" if cycles else "-")
        rows.append((*k, str(executions[k]), *cells))
    return format_table(rows)


def _count_text(alias: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.3f}" if alias in semconv.PERF_TIME_ALIASES else f"{value:,.0f}"

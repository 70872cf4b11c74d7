"""Where a profile's time went, as tables: top nodes, per op type, per provider, and, when
otel-ort's perf counters are in the file, the counts per op type and of the top nodes."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from otel_ort import semconv
from otel_ort.perf.tracks import counters
from otel_ort.profiling.model import NodeRecord, Profile
from otel_ort.tables import format_table

K = TypeVar("K")

Counts = dict[int, dict[str, float]]
"""perf counts per node: ``id(node)`` → alias → count."""
_IPC_INSTRUCTIONS, _IPC_CYCLES = " ipc instructions", " ipc cycles"  # no alias has a space


def summarize(profiles: Sequence[Profile], top: int = 15, title: str | None = None) -> str:
    """Tables over all runs of ``profiles``; shares are of the runs' total wall time.
    ``title``: what the first line names (default: the first profile's path)."""
    runs = [run for profile in profiles for run in profile.runs]
    nodes = [node for run in runs for node in run.nodes]
    run_total = sum(run.dur for run in runs) or 1.0
    header = (
        f"{title or profiles[0].path}: {len(runs)} run(s), {len(nodes)} node executions, "
        f"mean run {run_total / max(len(runs), 1) / 1000:.3f} ms"
    )
    if any(profile.truncated for profile in profiles):
        header += "  (file truncated: complete events only)"
    incomplete = sum(not run.complete for run in runs)
    if incomplete:
        header += f"  ({incomplete} run(s) incomplete: the file ends before they do)"
    sections = [
        header,
        f"Top {top} nodes by total time",
        _grouped(
            nodes,
            lambda n: (n.name, n.op_type, n.provider),
            ("node", "op type", "provider"),
            run_total,
            top,
        ),
        "Per op type",
        _grouped(nodes, lambda n: (n.op_type,), ("op type",), run_total),
        "Per provider",
        _grouped(nodes, lambda n: (n.provider,), ("provider",), run_total),
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


def totals_by(
    nodes: Iterable[NodeRecord], key: Callable[[NodeRecord], K]
) -> list[tuple[K, int, float]]:
    """(key, node count, total µs) per distinct ``key``, largest total first."""
    count: dict[K, int] = defaultdict(int)
    total: dict[K, float] = defaultdict(float)
    for node in nodes:
        k = key(node)
        count[k] += 1
        total[k] += node.dur
    return [(k, count[k], total[k]) for k in sorted(total, key=lambda k: -total[k])]


def _grouped(
    nodes: list[NodeRecord],
    key: Callable[[NodeRecord], tuple[str, ...]],
    labels: tuple[str, ...],
    run_total: float,
    top: int | None = None,
) -> str:
    rows = [(*labels, "count", "total ms", "mean us", "% of runs")]
    for k, count, total in totals_by(nodes, key)[:top]:
        rows.append(
            (
                *k,
                str(count),
                f"{total / 1000:.3f}",
                f"{total / count:.1f}",
                f"{100 * total / run_total:.1f}",
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

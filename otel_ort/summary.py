"""Where a profile's time went, as tables: top nodes, per op type, per provider."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

from otel_ort.profiling.model import NodeRecord, Profile
from otel_ort.tables import format_table

K = TypeVar("K")


def summarize(profile: Profile, top: int = 15) -> str:
    """Tables over all runs of ``profile``; shares are of the runs' total wall time."""
    runs = profile.runs
    nodes = [node for run in runs for node in run.nodes]
    run_total = sum(run.dur for run in runs) or 1.0
    header = (
        f"{profile.path}: {len(runs)} run(s), {len(nodes)} node executions, "
        f"mean run {run_total / max(len(runs), 1) / 1000:.3f} ms"
    )
    if profile.truncated:
        header += "  (file truncated: complete events only)"
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

"""Where a profile's time went, as tables: top nodes, per op type, per provider."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from otel_ort.profiling.model import NodeRecord, Profile
from otel_ort.tables import format_table


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


def _grouped(
    nodes: list[NodeRecord],
    key: Callable[[NodeRecord], tuple[str, ...]],
    labels: tuple[str, ...],
    run_total: float,
    top: int | None = None,
) -> str:
    count: dict[tuple[str, ...], int] = defaultdict(int)
    total: dict[tuple[str, ...], float] = defaultdict(float)
    for node in nodes:
        k = key(node)
        count[k] += 1
        total[k] += node.dur
    ordered = sorted(total, key=lambda k: total[k], reverse=True)[:top]
    rows = [(*labels, "count", "total ms", "mean us", "% of runs")]
    for k in ordered:
        rows.append(
            (
                *k,
                str(count[k]),
                f"{total[k] / 1000:.3f}",
                f"{total[k] / count[k]:.1f}",
                f"{100 * total[k] / run_total:.1f}",
            )
        )
    return format_table(rows)

"""What a profile holds once read: runs, their nodes, and the GPU kernels under the nodes.

Times stay in the file's unit, microseconds relative to the profile's start (``ts``); the
span builder turns them into absolute nanoseconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class _Window:
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)
class KernelRecord(_Window):
    """One ``Kernel`` event: a GPU kernel launched by a node."""

    name: str
    args: Mapping[str, Any]


@dataclass(slots=True)
class NodeRecord(_Window):
    """One ``Node`` event (``<node>_kernel_time``): one graph node executed once."""

    name: str
    op_type: str
    provider: str
    tid: int | None
    args: Mapping[str, Any]
    """The event's args (read-only; parsed when first read, for a file read by type)."""
    kernels: list[KernelRecord] = field(default_factory=list)


@dataclass(slots=True)
class RunRecord(_Window):
    """One ``Run`` call: the ``model_run`` window and what happened inside it."""

    index: int
    """Position in the file, from 0."""
    tid: int | None = None
    """The thread that called ``Run`` (``model_run``'s ``tid``), when the file says."""
    nodes: list[NodeRecord] = field(default_factory=list)
    unmatched_kernels: list[KernelRecord] = field(default_factory=list)
    """Kernels no node could be found for: kept, shown under the run."""
    complete: bool = True
    """False when the file ends before the run's ``model_run`` event (a truncated file)."""


@dataclass(slots=True)
class Profile:
    """A profile file, read."""

    path: str
    runs: list[RunRecord]
    start_ns: int
    """Absolute time (ns since the epoch) of ``ts == 0``."""
    start_source: str
    """Where ``start_ns`` came from: ``caller``, ``file``, ``filename`` or ``mtime``."""
    event_count: int
    truncated: bool = False
    """The file ended mid-write; ``runs`` hold what was complete."""
    problems: list[str] = field(default_factory=list)
    """Events skipped and why, one line per kind of problem, with counts."""
    events: list[Any] = field(default_factory=list, repr=False)
    """The file's events as loaded (for rewriting the file without parsing it again): dicts,
    or :class:`~otel_ort.profiles.ort_events.OrtEvent` s for a file in exactly ORT's shape
    (which has none of the metadata and counter events otel-ort adds: readers of those look
    at dicts only)."""


def holders(nodes: Sequence[NodeRecord]) -> list[int | None]:
    """Each node's holder: the index of the innermost node on its thread whose window holds
    it, or ``None``. A control-flow node (Loop, If, Scan) runs its subgraphs' nodes inside its
    own window, on its thread; ORT gives whole µs, so a held node may end up to 1 µs past its
    holder."""
    held: list[int | None] = [None] * len(nodes)
    open_windows: dict[int | None, list[int]] = defaultdict(list)  # per thread
    for at in sorted(range(len(nodes)), key=lambda at: (nodes[at].ts, -nodes[at].dur)):
        node, stack = nodes[at], open_windows[nodes[at].tid]
        while stack and not (
            node.ts < nodes[stack[-1]].end and node.end <= nodes[stack[-1]].end + 1
        ):
            stack.pop()
        if stack:
            held[at] = stack[-1]
        stack.append(at)
    return held

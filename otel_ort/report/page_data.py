"""A read profile → the data the report page draws: compact JSON-ready lists.

Strings (node, op type, provider, shape and kernel texts) are stored once in a table and
referred to by index, and each node is one short array, so a run of 10,000 nodes embeds in
well under a megabyte. Times are microseconds from the run's start.

The page's layout of the data (``report.js`` reads it):

``file``, ``path``, ``version`` (otel-ort's), ``timeBase`` (where the absolute start came
from), ``meta`` (``[label, value]`` from ``otherData``), ``notes``, ``run`` (index of the run
shown first), ``top``. ``s``: the string table. ``th``: ``[tid, thread name]``. ``ops``: op
type string indices, most time first over the embedded runs (their colours). ``perf``: the
perf aliases shown; ``perfNs``: per alias, whether its counts are nanoseconds (shown as
times). ``runs[i]``: ``i`` index in the file, ``dur``, ``nn`` node count, ``e``
embedded (0/1), and when embedded: ``ok`` complete, ``trace``/``span`` ids, ``start`` (ISO
time), ``n`` nodes ``[name, op, provider, tid, ts, dur, inputs, outputs]``, ``c`` the nodes'
perf counts (``null`` or one value per alias; empty when none), ``k`` kernels ``[node (-1:
none), name, ts, dur, launch detail]``, ``ot`` per op type ``[op, count, total µs]`` (most
first), ``top`` node positions, longest first; ``h`` each node's holder (the position of
the innermost node whose window holds it on its thread: a Loop, If or Scan holding its
subgraphs' nodes; -1: none) and ``d`` its nesting depth (0: held by none), both empty when no
node is held; ``cpu`` (``null`` without a perf time count per node) the CPU time the perf
counters gave the outermost nodes: ``alias`` (task-clock), ``total`` (ns, summed over every
thread counted: the threads running nodes and ORT's pool threads), ``wall`` (µs, those nodes'
durations), ``nodes`` (how many), ``threads`` (``[tid, wall µs of its counted nodes]``, the
threads that ran them); ``pools`` ORT's thread pools the nodes ran on (from their
``thread_scheduling_stats``): ``[pool name, its threads besides the caller]``.
"""

from __future__ import annotations

import datetime
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_ort import semconv
from otel_ort.perf.tracks import Counters, counters
from otel_ort.profiles import enriched
from otel_ort.profiles.records import KernelRecord, NodeRecord, Profile, RunRecord, holders
from otel_ort.profiles.summary import self_times, totals_by
from otel_ort.version import __version__

DEFAULT_TOP = 20
DEFAULT_MAX_NODES = 250_000
"""Nodes embedded in one page at most (about 15 MB of JSON): the shown run always is, other
runs of a session-level file while they fit."""
FORMAT_VERSION = 1

_META_KEYS = (
    ("model", "model"),
    ("session_id", "session"),
    ("otel_ort_version", "kept by otel-ort"),
)


class ReportError(ValueError):
    """A report that cannot be made; the message names the problem and the fix."""


@dataclass(frozen=True)
class PageData:
    """What the page embeds, and the notes it shows (also for the terminal)."""

    data: dict[str, Any]
    notes: list[str]
    run: int
    """The run shown first (its index in the file)."""


class _Strings:
    """A string table: each distinct text once, referred to by position."""

    def __init__(self) -> None:
        self.table: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.table)
            self.table.append(text)
        return index


def page_data(
    profile: Profile,
    *,
    other_data: Mapping[str, Any] | None = None,
    perf: bool | None = None,
    top: int = DEFAULT_TOP,
    run: int | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> PageData:
    """The page's data for ``profile``.

    ``perf``: ``None`` shows perf counters when the file has them, ``True`` asks for them
    (a note says so when there are none), ``False`` leaves them out. ``run``: the index of
    the run shown first (default: the first run with events). ``top``: rows of the
    top-nodes table. ``ReportError`` when there is nothing to draw or ``run`` is out of range.
    """
    if top < 1:
        raise ReportError(f"top must be at least 1, got {top}")
    name = os.path.basename(profile.path)
    shown = _shown_run(profile, run)
    other = dict(other_data or {})
    notes = _file_notes(profile)
    counts = counters(profile.events) if perf is not False else Counters()
    if perf and not counts.aliases:
        notes.append(
            f"perf counters were asked for, but {name} has none: otel-ort's profiler records "
            "them (perf_events, Linux) into the profiles it keeps; ORT's own files never have "
            "them. The report shows the nodes without counters."
        )
    ids = enriched.run_ids(profile.events, profile.runs, other)
    strings = _Strings()
    embedded = _embedded(profile.runs, shown, max_nodes)
    runs: list[dict[str, Any]] = []
    op_time: dict[int, float] = defaultdict(float)
    for each in profile.runs:
        if each.index not in embedded:
            runs.append({"i": each.index, "dur": _number(each.dur), "nn": len(each.nodes), "e": 0})
            continue
        entry = _run(each, profile.start_ns, ids[each.index], counts, strings, top)
        for op, _, total in entry["ot"]:
            op_time[op] += total
        runs.append(entry)
    if len(embedded) < len(profile.runs):
        notes.append(
            f"{len(profile.runs) - len(embedded)} of {len(profile.runs)} runs are listed but not "
            f"embedded (a page holds {max_nodes:,} nodes at most): "
            f"`otel-ort report {profile.path} --run N` shows run N"
        )
    threads = enriched.thread_names(profile.events)
    tids = {node.tid for each in profile.runs if each.index in embedded for node in each.nodes}
    data = {
        "v": FORMAT_VERSION,
        "file": name,
        "path": profile.path,
        "version": __version__,
        "timeBase": profile.start_source,
        "meta": [[label, str(other[key])] for key, label in _META_KEYS if other.get(key)],
        "perf": counts.aliases,
        "perfNs": [alias in semconv.PERF_TIME_ALIASES for alias in counts.aliases],
        "notes": notes,
        "s": strings.table,
        "th": [[tid, threads[tid]] for tid in sorted(tids, key=_tid_key) if tid in threads],
        "ops": sorted(op_time, key=lambda op: -op_time[op]),
        "runs": runs,
        "run": shown,
        "top": top,
    }
    return PageData(data=data, notes=notes, run=shown)


def _tid_key(tid: int | None) -> int:
    return -1 if tid is None else tid


def _shown_run(profile: Profile, run: int | None) -> int:
    runs = profile.runs
    drawable = [each.index for each in runs if each.nodes or each.unmatched_kernels]
    if not drawable:
        raise ReportError(
            f"{profile.path}: no run has node or kernel events, so there is nothing to draw "
            "(ORT wrote only session events): profile runs of the model, e.g. "
            "`otel-ort profile MODEL.onnx`"
        )
    if run is None:
        return drawable[0]
    if not 0 <= run < len(runs):
        raise ReportError(
            f"--run {run}: {profile.path} has {len(runs)} run(s), numbered 0 to {len(runs) - 1}"
        )
    if run not in drawable:
        raise ReportError(
            f"--run {run}: run {run} of {profile.path} has no node or kernel events: pick one "
            f"that has, e.g. --run {drawable[0]} (runs with events: {_ranges(drawable)})"
        )
    return run


def _ranges(indices: list[int]) -> str:
    """``0-3, 5, 7-9``."""
    parts: list[str] = []
    start = previous = indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ", ".join(parts)


def _embedded(runs: list[RunRecord], shown: int, max_nodes: int) -> set[int]:
    """The runs whose nodes go into the page: the shown one, then others in file order."""
    chosen = {shown}
    budget = max_nodes - len(runs[shown].nodes)
    for each in runs:
        if each.index != shown and len(each.nodes) <= budget:
            chosen.add(each.index)
            budget -= len(each.nodes)
    return chosen


def _file_notes(profile: Profile) -> list[str]:
    notes = []
    if profile.truncated:
        incomplete = [str(run.index) for run in profile.runs if not run.complete]
        notes.append(
            "the file was cut short (its writer stopped mid-write): complete events only"
            + (f"; run {', '.join(incomplete)} is incomplete" if incomplete else "")
        )
    notes.extend(profile.problems)
    return notes


def _run(
    run: RunRecord,
    start_ns: int,
    ids: tuple[str | None, str | None],
    counts: Counters,
    strings: _Strings,
    top: int,
) -> dict[str, Any]:
    base = run.ts
    nodes: list[list[Any]] = []
    perf_values: list[list[int | float | None] | None] = []
    kernels: list[list[Any]] = []
    node_counts = counts.for_nodes(run.nodes)
    for position, node in enumerate(run.nodes):
        op = strings(node.op_type)
        nodes.append(
            [
                strings(node.name),
                op,
                strings(node.provider),
                node.tid,
                _number(node.ts - base),
                _number(node.dur),
                strings(_shapes(node.args.get("input_type_shape"))),
                strings(_shapes(node.args.get("output_type_shape"))),
            ]
        )
        if counts.aliases:
            values = node_counts[position]
            perf_values.append(
                None if values is None else [values.get(alias) for alias in counts.aliases]
            )
        kernels.extend(_kernel(kernel, position, base, strings) for kernel in node.kernels)
    kernels.extend(_kernel(kernel, -1, base, strings) for kernel in run.unmatched_kernels)
    order = sorted(range(len(run.nodes)), key=lambda at: -run.nodes[at].dur)
    held = holders(run.nodes)
    depths = nesting_depths(held)
    nested = any(depths)
    return {
        "i": run.index,
        "e": 1,
        "ok": int(run.complete),
        "dur": _number(run.dur),
        "nn": len(nodes),
        "start": _iso(start_ns + int(run.ts * 1000)),
        "trace": ids[0],
        "span": ids[1],
        "n": nodes,
        "c": perf_values if any(value is not None for value in perf_values) else [],
        "k": kernels,
        "ot": [
            [strings(op), count, _number(own)]
            for op, count, _, own in totals_by(
                run.nodes, self_times(run.nodes), lambda node: node.op_type
            )
        ],
        "top": order[:top],
        "h": [-1 if holder is None else holder for holder in held] if nested else [],
        "d": depths if nested else [],
        "cpu": _cpu(run.nodes, held, node_counts, counts.aliases),
        "pools": _pools(run.nodes),
    }


def nesting_depths(held: list[int | None]) -> list[int]:
    """Each node's depth from its holder (``holders``): 0 for a node no other holds, its
    holder's depth + 1 otherwise (a Loop's body node 1, a node of a Loop inside it 2)."""
    depths = [-1] * len(held)
    for first in range(len(held)):
        chain: list[int] = []
        at: int | None = first
        while at is not None and depths[at] < 0:
            chain.append(at)
            at = held[at]
        depth = -1 if at is None else depths[at]
        for link in reversed(chain):
            depth += 1
            depths[link] = depth
    return depths


def _cpu(
    nodes: list[NodeRecord],
    held: list[int | None],
    node_counts: list[dict[str, int | float] | None],
    aliases: list[str],
) -> dict[str, Any] | None:
    """What the perf time count (task-clock) says of the outermost nodes' CPU time, next to
    their wall time per thread that ran them; ``None`` when no node has one."""
    alias = next((name for name in semconv.PERF_TIME_ALIASES if name in aliases), None)
    if alias is None:
        return None
    total = wall = 0.0
    counted = 0
    per_thread: dict[int | None, float] = defaultdict(float)
    for node, holder, values in zip(nodes, held, node_counts, strict=True):
        value = None if values is None else values.get(alias)
        if holder is not None or value is None:
            continue  # a held node's time is in its holder's window
        total += value
        wall += node.dur
        counted += 1
        per_thread[node.tid] += node.dur
    if not counted:
        return None
    return {
        "alias": alias,
        "total": _number(total),
        "wall": _number(wall),
        "nodes": counted,
        "threads": [[tid, _number(per_thread[tid])] for tid in sorted(per_thread, key=_tid_key)],
    }


def _pools(nodes: list[NodeRecord]) -> list[list[Any]]:
    """ORT's thread pools that ran parts of the nodes: ``[name, worker threads]``, from the
    ``thread_scheduling_stats`` ORT's profiler puts in a node's args (its ``sub_threads``
    are the pool's threads besides the calling one)."""
    workers: dict[str, set[str]] = {}
    for node in nodes:
        stats = node.args.get("thread_scheduling_stats")
        if not isinstance(stats, dict):
            continue
        main, subs = stats.get("main_thread"), stats.get("sub_threads")
        name = main.get("thread_pool_name") if isinstance(main, dict) else None
        if not isinstance(name, str):
            continue
        workers.setdefault(name, set()).update(subs if isinstance(subs, dict) else ())
    return [[name, len(threads)] for name, threads in sorted(workers.items())]


def _kernel(kernel: KernelRecord, node: int, base: float, strings: _Strings) -> list[Any]:
    return [
        node,
        strings(kernel.name),
        _number(kernel.ts - base),
        _number(kernel.dur),
        strings(_kernel_detail(kernel.args)),
    ]


def _kernel_detail(args: Mapping[str, Any]) -> str:
    parts = []
    grid = [str(args.get(f"grid_{axis}", "")) for axis in "xyz"]
    block = [str(args.get(f"block_{axis}", "")) for axis in "xyz"]
    if all(grid):
        parts.append("grid " + "x".join(grid))
    if all(block):
        parts.append("block " + "x".join(block))
    if "stream" in args:
        parts.append(f"stream {args['stream']}")
    return ", ".join(parts)


def _shapes(value: object) -> str:
    """ORT's ``[{"float": [8, 64]}, ...]`` as ``float[8,64] float[64]``."""
    if not isinstance(value, list):
        return ""
    parts = []
    for item in value:
        if isinstance(item, dict) and len(item) == 1:
            ((dtype, dims),) = item.items()
            if isinstance(dims, list):
                parts.append(f"{dtype}[{','.join(str(dim) for dim in dims)}]")
                continue
        parts.append(str(item))
    return " ".join(parts)


def _number(value: float) -> int | float:
    """Whole numbers as ints (shorter JSON), others to a thousandth of a microsecond."""
    return int(value) if float(value).is_integer() else round(value, 3)


def _iso(ns: int) -> str:
    """``ns`` since the epoch as UTC ISO 8601; ``""`` for a time no calendar holds (a
    start a crafted file declares)."""
    try:
        moment = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return ""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

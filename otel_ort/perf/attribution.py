"""Counts per node from what each thread's events recorded during one run.

Per thread, the switch records give the exact on-CPU intervals inside the counting window;
then, for a node's window ``[a, b)`` (from ORT's profile, on the same CLOCK_REALTIME):

- ``time`` events (task-clock): on-CPU time inside the window, exact;
- ``context-switches``: switch-out records inside the window, exact;
- ``sparse`` events (faults, migrations; sampled at period 1): samples inside the window, exact
  unless the kernel throttled samples (``perf.throttled`` on the run says so);
- ``dense`` events (hardware counters, cpu-clock): the group's values at the start, at each
  leader sample and at the end, interpolated linearly in on-CPU time; for a multiplexed group
  each step is scaled by its Δenabled/Δrunning, and a step that never ran is unknown (NaN).

Node values sum over the run's threads. Run totals are the same records over the whole
counting window (dense events: the reads at its start and end, scaled); ``between`` is what
fell outside every node window. Windows may nest (a control-flow node holds its subgraph's
nodes): each node's value is its whole window's, and ``between`` counts only the outermost
windows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isnan

import numpy as np
import numpy.typing as npt

from otel_ort._util.native import NATIVE_WANTED
from otel_ort.perf.records import ThreadRecords

try:
    from otel_ort.perf import _node_counts
except ImportError:  # not built at install: every thread is attributed with numpy
    _node_counts = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _node_counts = None  # type: ignore[assignment]

Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Read:
    """A group read: time enabled, time running, raw values by event id."""

    enabled: int
    running: int
    values: Mapping[int, int]


@dataclass(slots=True)
class ThreadRun:
    """What one thread's events gave for one run."""

    tid: int
    window: tuple[int, int]
    """When it was counted (ns, CLOCK_REALTIME): its records from then to then are its run's."""
    dense_before: Read | None
    dense_after: Read | None
    """The dense group's reads, when dense events are counted."""
    records: ThreadRecords
    ids: Mapping[str, int]
    """Event id of each counted alias on this thread (the time alias is the leader)."""
    incomplete: frozenset[str] = frozenset()
    """Records that are not all there (a ring filled up, or no longer held the window's
    start): ``switches``, ``dense`` or a sparse alias. What depends on them is unknown (NaN),
    per node and in total."""
    running: bool = False
    """Whether it was on a CPU throughout, when it has no switch record at all (it never
    switched since its events were opened)."""


@dataclass(frozen=True, slots=True)
class Counted:
    """How each alias is counted: by its kind (``time``, ``sparse``, ``dense``, or
    ``switches`` for context switches taken from switch records)."""

    kinds: Mapping[str, str]
    time_alias: str


@dataclass(frozen=True, slots=True)
class ThreadColumns:
    """One thread's values per node, one array per alias (in node order)."""

    tid: int
    on_cpu: npt.NDArray[np.bool_]
    """The nodes during which it was on a CPU (its time alias's value > 0)."""
    values: dict[str, Array]


@dataclass(frozen=True, slots=True)
class NodeColumns:
    """Per-node values as arrays: what ``attribute`` makes; the per-node dicts of
    ``Attribution`` are made from it only when asked for."""

    aliases: tuple[str, ...]
    """In the order counted (the time alias first); empty when no thread was counted."""
    values: dict[str, Array]
    """Per alias, each node's value summed over the threads (in thread order)."""
    threads: tuple[ThreadColumns, ...]
    """In the order attributed."""
    nodes: int


class Attribution:
    """A run's counts: per node, the run's totals and what fell between nodes. ``attribute``
    gives the per-node values as arrays (``columns``, which ``node_attributes`` and
    ``counter_events`` read); ``nodes`` and ``threads``, dicts, are made from them when first
    asked for (a few µs per node)."""

    __slots__ = ("_nodes", "_threads", "between", "columns", "scaling", "totals")

    def __init__(
        self,
        nodes: list[dict[str, float]] | None = None,
        threads: list[dict[int, dict[str, float]]] | None = None,
        totals: dict[str, float] | None = None,
        between: dict[str, float] | None = None,
        scaling: dict[str, tuple[int, int]] | None = None,
        *,
        columns: NodeColumns | None = None,
    ) -> None:
        if columns is None and (nodes is None or threads is None):
            raise ValueError("Attribution needs nodes and threads, or columns")
        self._nodes = nodes
        self._threads = threads
        self.columns = columns
        """The per-node values as ``attribute`` made them (``None``: given as dicts)."""
        self.totals: dict[str, float] = totals if totals is not None else {}
        self.between: dict[str, float] = between if between is not None else {}
        self.scaling: dict[str, tuple[int, int]] = scaling if scaling is not None else {}
        """Dense aliases: (Δenabled, Δrunning) summed over the threads (multiplexed:
        unequal)."""

    @property
    def nodes(self) -> list[dict[str, float]]:
        """Per node (in the order given), value per alias."""
        if self._nodes is None:
            assert self.columns is not None
            columns = self.columns
            rows = zip(*(columns.values[alias].tolist() for alias in columns.aliases), strict=True)
            self._nodes = (
                [dict(zip(columns.aliases, row, strict=True)) for row in rows]
                if columns.aliases
                else [{} for _ in range(columns.nodes)]
            )
        return self._nodes

    @property
    def threads(self) -> list[dict[int, dict[str, float]]]:
        """Per node, per thread that was on a CPU during it: value per alias."""
        if self._threads is None:
            assert self.columns is not None
            threads: list[dict[int, dict[str, float]]] = [{} for _ in range(self.columns.nodes)]
            for thread in self.columns.threads:
                for index in np.flatnonzero(thread.on_cpu).tolist():
                    threads[index][thread.tid] = {
                        alias: float(values[index]) for alias, values in thread.values.items()
                    }
            self._threads = threads
        return self._threads


Windows = Sequence[tuple[int, int]] | npt.NDArray[np.int64]
"""Node windows, ns ``(start, end)``: pairs, or an array of them (shape ``(nodes, 2)``)."""


def window_array(windows: Windows) -> npt.NDArray[np.int64]:
    """``windows`` as an int64 array of shape ``(nodes, 2)``."""
    if isinstance(windows, np.ndarray):
        return windows.astype(np.int64, copy=False).reshape(-1, 2)
    flat = itertools.chain.from_iterable(windows)  # cheaper than np.array of the tuples
    return np.fromiter(flat, np.int64, 2 * len(windows)).reshape(-1, 2)


def attribute(runs: Sequence[ThreadRun], windows: Windows, counted: Counted) -> Attribution:
    """Per-node values for ``windows`` (ns ``(start, end)``, in order of start; nested or
    apart, not overlapping) from ``runs``."""
    pairs = window_array(windows)
    origin = int(pairs[0, 0]) if len(pairs) else 0
    starts = (pairs[:, 0] - origin).astype(np.float64)
    ends = (pairs[:, 1] - origin).astype(np.float64)
    outermost = _outermost(starts, ends)
    result = Attribution(columns=NodeColumns((), {}, (), len(pairs)))
    sums: dict[str, Array] = {}
    threads = []
    for run in runs:
        per_node = _values_in_c(run, origin, starts, ends, outermost, counted, result)
        if per_node is None:
            on_cpu = _OnCpu(run, origin)
            per_node = _thread_values(run, on_cpu, starts, ends, outermost, counted, result)
        threads.append(ThreadColumns(run.tid, per_node[counted.time_alias] > 0, per_node))
        for alias, array in per_node.items():
            sums[alias] = sums.get(alias, np.zeros(len(pairs))) + array
    result.columns = NodeColumns(tuple(sums), sums, tuple(threads), len(pairs))
    return result


_EXACT_INT = 2.0**62
"""Below this, an array's ``rint`` fits int64 and equals Python's ``round``."""


def as_ints(values: Array) -> npt.NDArray[np.int64] | None:
    """``round(value)`` of each value, as Python's ``round`` gives it, NaN as 0; ``None`` if
    some value is infinite or too large for int64 (round those one by one)."""
    known = np.where(np.isnan(values), 0.0, values)
    if not bool((np.abs(known) < _EXACT_INT).all()):
        return None
    return np.rint(known).astype(np.int64)


def rounded(values: Array) -> list[int | None]:
    """``round(value)`` of each value (``None`` for NaN), as Python's ``round`` gives it."""
    ints = as_ints(values)
    if ints is None:  # inf or huge: as Python does (raises for inf)
        return [None if isnan(value) else round(value) for value in values.tolist()]
    out: list[int | None] = ints.tolist()
    for index in np.flatnonzero(np.isnan(values)).tolist():
        out[index] = None
    return out


def _thread_values(
    run: ThreadRun,
    on_cpu: _OnCpu,
    starts: Array,
    ends: Array,
    outermost: npt.NDArray[np.bool_],
    counted: Counted,
    result: Attribution,
) -> dict[str, Array]:
    """One thread's value per node for each alias; adds its totals to ``result``."""
    out: dict[str, Array] = {}
    recorded: dict[str, float] = {}
    for alias, kind in counted.kinds.items():
        if kind == "time":
            out[alias] = on_cpu.at(ends) - on_cpu.at(starts)
            recorded[alias] = total = on_cpu.total
        elif kind == "switches":
            times = on_cpu.switched_out
            out[alias] = _counts_in(times, starts, ends, on_cpu.window)
            recorded[alias] = total = float(len(_inside(times, on_cpu.window)))
        elif kind == "sparse":
            times = on_cpu.since(run.records.events.get(run.ids[alias], ()))
            out[alias] = _counts_in(times, starts, ends, on_cpu.window)
            recorded[alias] = total = float(len(_inside(times, on_cpu.window)))
        else:
            positions, values, unknown, scale = _dense_series(run, run.ids[alias], on_cpu)
            low, high = on_cpu.at(starts), on_cpu.at(ends)
            known = np.interp(high, positions, unknown) == np.interp(low, positions, unknown)
            delta = np.interp(high, positions, values) - np.interp(low, positions, values)
            out[alias] = np.where(known, delta, math.nan)
            recorded[alias] = total = float(values[-1]) if unknown[-1] == 0 else math.nan
            if scale is not None:
                enabled, running = result.scaling.get(alias, (0, 0))
                result.scaling[alias] = (enabled + scale[0], running + scale[1])
        needs = {"sparse": {alias}, "dense": {"dense", "switches"}}.get(kind, {"switches"})
        if needs & run.incomplete:  # its records are not all there: unknown
            out[alias] = np.full_like(starts, math.nan)
            if kind != "dense":  # the reads at the start and end give the dense totals
                total = math.nan
        _add(result.totals, alias, total)
        _add(result.between, alias, recorded[alias] - float(out[alias][outermost].sum()))
    return out


_C_KINDS = {"time": 0, "switches": 1, "sparse": 2}
"""The kinds the C part attributes (dense events: numpy's interpolation here)."""


def _values_in_c(
    run: ThreadRun,
    origin: int,
    starts: Array,
    ends: Array,
    outermost: npt.NDArray[np.bool_],
    counted: Counted,
    result: Attribution,
) -> dict[str, Array] | None:
    """``_thread_values`` in C (``_node_counts``), where it was built and every alias is of a
    kind it takes; ``None``: numpy's turn."""
    if _node_counts is None or not all(kind in _C_KINDS for kind in counted.kinds.values()):
        return None
    specs: list[tuple[int, list[int] | None, bool]] = []
    for alias, kind in counted.kinds.items():
        if kind == "sparse":
            specs.append((2, run.records.events.get(run.ids[alias]) or [], alias in run.incomplete))
        else:
            specs.append((_C_KINDS[kind], None, "switches" in run.incomplete))
    made = _node_counts.thread_values(
        run.records.switches, *run.window, run.running, origin, starts, ends, outermost,
        tuple(specs),
    )  # fmt: skip
    if made is NotImplemented:
        return None
    out: dict[str, Array] = {}
    for alias, (values, total, between) in zip(counted.kinds, made, strict=True):
        out[alias] = np.frombuffer(values, np.float64)
        _add(result.totals, alias, total)
        _add(result.between, alias, between)
    return out


def _outermost(starts: Array, ends: Array) -> npt.NDArray[np.bool_]:
    """Which windows no other window holds (of two starting together, the longer holds;
    ORT's whole µs may put a held window's end 1 µs past its holder's)."""
    order = np.lexsort((-ends, starts))
    ordered_starts, ordered_ends = starts[order], ends[order]
    held = np.zeros(len(order), dtype=bool)
    if len(order):
        reach = np.maximum.accumulate(ordered_ends)[:-1]  # of the windows starting before
        held[order[1:]] = (ordered_starts[1:] < reach) & (
            ordered_ends[1:] <= reach + _ORT_ROUNDING_NS / 2
        )
    return ~held


_ORT_ROUNDING_NS = 2_000
"""How early a window edge may be placed: ORT gives a node's start and duration in whole µs."""
_MAX_MOVES = 64


def late_start(run: ThreadRun, windows: Windows) -> int:
    """How much later ``windows`` really are, by ``run``'s thread (the calling thread, which
    ran every node: sequential execution), ns.

    The windows are placed from a stamp taken just before ORT's run began; ORT's own start of
    the profile comes a little later, much later if the thread was preempted in between (a
    whole time slice, milliseconds, on a loaded machine). ORT stamps each node's start and end
    on that thread, so while it is on a CPU: the windows move by the least amount that puts
    every edge where the thread's switch records say it was on one (within ORT's rounding,
    either side: ORT's steady clock is also not perf's realtime one); 0 when nothing is known
    or no move within the end of its counting window fits."""
    pairs = window_array(windows)
    if not len(pairs) or "switches" in run.incomplete:
        return 0
    origin = int(pairs[0, 0])
    on_cpu = _OnCpu(run, origin)
    if not len(on_cpu.starts):
        return 0
    starts = on_cpu.starts - _ORT_ROUNDING_NS
    ends = on_cpu.starts + on_cpu.lengths + _ORT_ROUNDING_NS
    edges = (pairs.reshape(-1) - origin).astype(np.float64)
    limit = max(0, run.window[1] - int(pairs[-1, 1]))
    late = 0.0
    for _ in range(_MAX_MOVES):  # each move is the least that puts one more edge on a CPU
        times = edges + late
        index = np.searchsorted(ends, times)  # the first on-CPU interval not over by then
        off = (index == len(ends)) | (starts[np.minimum(index, len(ends) - 1)] > times)
        if not off.any():
            return int(late)
        first = int(np.argmax(off))
        if index[first] == len(ends):  # after the thread's last time on a CPU
            return 0
        late = starts[index[first]] - edges[first]
        if late > limit:
            return 0
    return 0


class _OnCpu:
    """A thread's on-CPU intervals inside its window, from its switch records; times in ns
    since ``origin`` (float64 holds ns since the epoch only to 256 ns)."""

    def __init__(self, run: ThreadRun, origin: int) -> None:
        self.origin = origin
        begin, end = run.window
        self.window = (begin - origin, end - origin)
        switches = run.records.switches
        table = np.fromiter(  # time, out; cheaper than np.array of the tuples
            itertools.chain.from_iterable(switches), np.int64, 2 * len(switches)
        ).reshape(-1, 2)
        table = table[np.lexsort((table[:, 1], table[:, 0]))]
        out = table[:, 1].astype(bool)
        self.switched_out = (table[out, 0] - origin).astype(np.float64)
        """When it was switched out (ns since ``origin``), in time order."""
        times = np.clip(table[:, 0], begin, end)
        # on a CPU when counting began if its first switch is out; with no switch at all, on a
        # CPU throughout or never; after each switch, on a CPU if it was switched in
        first = bool(out[0]) if len(out) else run.running
        intervals = out & np.concatenate(([first], ~out[:-1]))  # switched out while on one
        lefts = np.concatenate(([begin], times[:-1]))[intervals]
        rights = times[intervals]
        if not out[-1] if len(out) else first:  # on a CPU until the end
            lefts = np.append(lefts, times[-1] if len(times) else begin)
            rights = np.append(rights, end)
        self.starts = (lefts - origin).astype(np.float64)
        self.lengths = (rights - origin).astype(np.float64) - self.starts
        self.before = np.concatenate(([0.0], np.cumsum(self.lengths)))
        self.total = float(self.before[-1])

    def since(self, times: Sequence[int]) -> Array:
        """Absolute ``times`` (ns) as ns since ``origin``."""
        return _since(self.origin, times)

    def at(self, times: Array) -> Array:
        """On-CPU time from the window's start up to each of ``times``."""
        if not len(self.starts):
            return np.zeros_like(times)
        index = np.maximum(np.searchsorted(self.starts, times, side="right") - 1, 0)
        inside = np.clip(times - self.starts[index], 0, self.lengths[index])
        return np.where(times >= self.starts[0], self.before[index] + inside, 0.0)


def _dense_series(
    run: ThreadRun, event: int, on_cpu: _OnCpu
) -> tuple[Array, Array, Array, tuple[int, int] | None]:
    """At the start, each dense sample and the end: the thread's on-CPU time so far, the
    scaled cumulative value, and how many steps so far were unknown (the group was enabled but
    never ran); the run's (Δenabled, Δrunning)."""
    first_read, last_read = run.dense_before, run.dense_after
    if first_read is None or last_read is None:
        raise ValueError(f"thread {run.tid}: no dense group read")
    samples = [  # a pool thread's group stays on: samples from outside the reads are not its
        s for s in run.records.group_samples if first_read.enabled <= s.enabled <= last_read.enabled
    ]
    reads = [first_read, *(Read(s.enabled, s.running, s.values) for s in samples), last_read]
    at = [0.0, *on_cpu.at(on_cpu.since([s.time for s in samples])).tolist()]
    at.append(on_cpu.total)
    positions, values, unknown = [0.0], [0.0], [0]
    for (first, second), position in zip(itertools.pairwise(reads), at[1:], strict=True):
        enabled = second.enabled - first.enabled
        running = second.running - first.running
        step = second.values.get(event, 0) - first.values.get(event, 0)
        positions.append(max(position, positions[-1]))
        values.append(values[-1] + (step * enabled / running if running else 0.0))
        unknown.append(unknown[-1] + (enabled > 0 and running == 0))
    enabled = last_read.enabled - first_read.enabled
    running = last_read.running - first_read.running
    scale = (enabled, running) if enabled else None
    return np.array(positions), np.array(values), np.array(unknown, dtype=np.float64), scale


def _since(origin: int, times: Sequence[int]) -> Array:
    """Absolute ``times`` (ns) as float ns since ``origin``, exact before the conversion."""
    return (np.array(times, dtype=np.int64) - origin).astype(np.float64)


def _counts_in(times: Array, starts: Array, ends: Array, window: tuple[int, int]) -> Array:
    times = np.sort(_inside(times, window))
    counts = np.searchsorted(times, ends, side="left") - np.searchsorted(times, starts, "left")
    return counts.astype(np.float64)


def _inside(times: Array, window: tuple[int, int]) -> Array:
    return times[(times >= window[0]) & (times <= window[1])]


def _add(into: dict[str, float], alias: str, value: float) -> None:
    into[alias] = into.get(alias, 0.0) + value

"""Read an ORT profile file into runs → nodes → kernels, surviving every file ORT leaves behind.

Accepted shapes: a bare JSON array of trace events (what ORT writes) or an object with a
``traceEvents`` array; session-level files (many runs, split on their ``model_run`` events)
and run-level files (one run); runs that overlap, called on one session from several threads
(a node on a thread that called ``Run`` belongs to that thread's run); old files with
``<node>_fence_before``/``_fence_after`` events (counted, not nodes); the parallel executor's
files (nodes on several threads, overlapping); GPU ``Kernel`` events. Only complete
(``"ph": "X"``) events are read; metadata and counter events (which otel-ort itself adds)
are passed over.

A kernel belongs to the node its args name (``parent_name``: the node's event name, which
ORT >= 1.14 writes when it found the launching node) when present; otherwise to the node of
the same run whose op type equals the kernel's ``op_name`` and whose window contains the
kernel's start, the latest-starting one if several do. A kernel no node claims stays in its
run's ``unmatched_kernels``, never dropped.

Bad input raises :class:`ProfileError` naming the file and the problem. A file cut short
(a process killed mid-write) is not an error: its complete events are read, the profile is
marked ``truncated`` and a run whose ``model_run`` event never came is marked incomplete.
Events with missing or invalid fields are skipped and counted in ``Profile.problems``; lone
surrogates (``\\ud800`` escapes, which no encoder takes) become U+FFFD. A file in exactly
ORT's shape is decoded by type, its args left as raw text (:mod:`otel_ort.profiles.ort_events`);
others are parsed with orjson, and with the standard library's parser when orjson refuses one
(invalid UTF-8, lone surrogates, ``NaN``, a file cut short); orjson reads integers beyond 64
bits, which no ORT file holds, as floats.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import orjson
from msgspec import Raw

from otel_ort._util.gc_pause import gc_paused
from otel_ort._util.native import NATIVE_WANTED
from otel_ort.profiles.chrome import START_TIME_KEY
from otel_ort.profiles.ort_events import OrtEvent, RawArgs, decode_events, raw_value
from otel_ort.profiles.records import KernelRecord, NodeRecord, Profile, RunRecord

try:
    from otel_ort.profiles import _ort_nodes
except ImportError:  # not built at install: every event is added in Python
    _ort_nodes = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _ort_nodes = None  # type: ignore[assignment]

_NODE_SUFFIX = "_kernel_time"
_FENCE_SUFFIXES = ("_fence_before", "_fence_after")
_LINK_ARG = "parent_name"
_TOLERANCE_US = 1.0
"""ORT rounds ``ts`` and ``dur`` to whole microseconds: windows are compared with this slack."""
_W = TypeVar("_W", NodeRecord, RunRecord)
_FILENAME_TIME = re.compile(r"_(\d{4})-(\d{2})-(\d{2})_(\d{2})-(\d{2})-(\d{2})_(\d{3})\.json$")


class ProfileError(ValueError):
    """A profile file that cannot be read; the message names the file and what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def read_profile(path: str | os.PathLike[str], start_ns: int | None = None) -> Profile:
    """Read ``path``; ``start_ns`` is the absolute time of ``ts == 0`` when the caller knows it.

    Otherwise it comes from the file itself (``otherData.start_time_unix_ns``, which otel-ort
    writes into the files it keeps), else from the file name ORT gives profiles
    (``<prefix>_YYYY-MM-DD_HH-MM-SS_mmm.json``, local time, ms resolution), else from the
    file's modification time minus the last event's end.
    """
    path = os.fspath(path)
    with gc_paused():
        events, truncated, declared_start = _load_events(path)
        parsed = _Parsed(path)
        if events and type(events[0]) is OrtEvent:
            parsed.add_all_ort(events)
        else:
            for event in events:
                parsed.add(event)
        if not parsed.usable:
            summary = "; ".join(parsed.problem_lines()) or "no events"
            raise ProfileError(path, f"holds no ORT run, node or kernel events ({summary})")
        runs = parsed.runs()
    source = "caller"
    if start_ns is None and declared_start is not None:
        start_ns, source = declared_start, "file"
    elif start_ns is None:
        start_ns, source = _start_time(path, runs)
    return Profile(
        path=path,
        runs=runs,
        start_ns=start_ns,
        start_source=source,
        event_count=len(events),
        truncated=truncated,
        problems=parsed.problem_lines(),
        events=events,
    )


def file_bytes(path: str) -> bytes:
    """The file's bytes, decompressed when it is gzip (as the files otel-ort keeps are)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ProfileError(path, f"cannot be read ({exc.strerror})") from None
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise ProfileError(path, f"is not a readable gzip file ({exc})") from None


GZIP_MAGIC = b"\x1f\x8b"


def _load_events(path: str) -> tuple[list[Any], bool, int | None]:
    """The file's events, whether it was cut short, and the start time it declares (files
    otel-ort enriched say it in ``otherData``)."""
    data = file_bytes(path)
    if not data or data.isspace():  # not strip(): a copy of the file
        raise ProfileError(
            path,
            f"is empty ({len(data)} bytes): ORT leaves an empty file when a profiled run "
            "fails or its profile cannot be written (a full disk), so this run has no profile",
        )
    ort_events = decode_events(data)  # a file as ORT writes it: typed, args left raw
    if ort_events is not None:
        return ort_events, False, None
    try:  # orjson: a valid file, read in a fraction of the standard library's time
        return _document_events(path, orjson.loads(data))
    except orjson.JSONDecodeError:  # not UTF-8, lone surrogates, NaN, cut short: read below
        pass
    # ORT writes a node's name as the model gives it, UTF-8 or not; a file cut short may end
    # inside a character
    text = data.decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        salvaged = _salvage(text)
        if not salvaged:
            # json's "Unterminated string starting at" already ends in the "at" said here
            problem = exc.msg.removesuffix(" at")
            raise ProfileError(
                path, f"is not JSON ({problem} at line {exc.lineno}, column {exc.colno})"
            ) from None
        return _valid_unicode(salvaged, text), True, None
    except RecursionError:
        raise ProfileError(path, "is JSON nested too deeply to be a trace") from None
    return _document_events(path, _valid_unicode(document, text))


def _document_events(path: str, document: Any) -> tuple[list[Any], bool, int | None]:
    """A whole file's events and the start time it declares."""
    declared_start = None
    if isinstance(document, dict):
        other = document.get("otherData")
        value = other.get(START_TIME_KEY) if isinstance(other, dict) else None
        declared_start = value if isinstance(value, int) and value > 0 else None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise ProfileError(
            path,
            f"is JSON but not a trace: expected an array of events or an object with a "
            f'"traceEvents" array, found {type(document).__name__}',
        )
    return events, False, declared_start


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _valid_unicode(document: Any, text: str) -> Any:
    """``document`` with the lone surrogates a ``\\ud800``-style escape gives (a file not
    written by ORT) replaced by U+FFFD: they cannot be encoded for export, a terminal or a
    page. Checked on the text first: files without such escapes, ORT's, cost a search."""
    if not _SURROGATE_ESCAPE.search(text):
        return document
    again = json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.loads(again.decode("utf-8", "replace"))


def _salvage(text: str) -> list[Any]:
    """The complete events at the start of a trace that was cut short or corrupted."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        position = len(text) - len(stripped) + 1
    else:
        match = re.search(r'"traceEvents"\s*:\s*\[', text)
        if match is None:
            return []
        position = match.end()
    decoder = json.JSONDecoder()
    events: list[Any] = []
    whitespace = re.compile(r"\s*,?\s*")
    while True:
        position = whitespace.match(text, position).end()  # type: ignore[union-attr]
        if position >= len(text) or text[position] == "]":
            return events
        try:
            event, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return events
        events.append(event)


_MAX_TIME_US = 1e15
"""31 years: a ``ts`` or ``dur`` beyond it is no time (and no date could show it)."""


def _time(value: object) -> float | None:
    """A valid ``ts``/``dur``: a JSON number, not negative and below ``_MAX_TIME_US``."""
    if type(value) in (int, float) and 0 <= value < _MAX_TIME_US:  # type: ignore[operator]
        return value  # type: ignore[return-value]
    return None


def _tid(event: dict[str, Any]) -> int | None:
    tid = event.get("tid")
    return tid if type(tid) is int else None


class _Parsed:
    """Events sorted into runs, nodes and kernels as they are read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.model_runs: list[RunRecord] = []
        self.nodes: list[NodeRecord] = []
        self.kernels: list[KernelRecord] = []
        self.fences = 0
        self.problems: Counter[str] = Counter()
        self._texts: dict[bytes, str] = {}

    @property
    def usable(self) -> bool:
        return bool(self.model_runs or self.nodes or self.kernels)

    def add(self, event: Any) -> None:
        if not isinstance(event, dict):
            self.problems["not a JSON object"] += 1
            return
        if event.get("ph", "X") != "X":
            return
        category, name = event.get("cat"), event.get("name")
        ts, dur = _time(event.get("ts")), _time(event.get("dur"))
        if not isinstance(name, str) or not isinstance(category, str):
            self.problems["no 'name' or 'cat' string"] += 1
            return
        if ts is None or dur is None:
            self.problems["'ts' or 'dur' missing, negative, not a number or over 31 years"] += 1
            return
        args = event.get("args")
        if not isinstance(args, dict):
            args = {}
        self._add_complete(category, name, ts, dur, _tid(event), args)

    def add_all_ort(self, events: list[OrtEvent]) -> None:
        """``add_ort`` of each event; in C (``_ort_nodes``) where it was built, for the
        events that become nodes once their op type and provider are cached."""
        if _ort_nodes is not None:
            _ort_nodes.node_records(
                events, self.nodes, self._texts, self.add_ort, NodeRecord, RawArgs
            )
            return
        for event in events:
            self.add_ort(event)

    def add_ort(self, event: OrtEvent) -> None:
        """``add`` for an event decoded by type (its fields' types already checked)."""
        if event.ph != "X":
            return
        ts, dur = _time(event.ts), _time(event.dur)
        if ts is None or dur is None:
            self.problems["'ts' or 'dur' missing, negative, not a number or over 31 years"] += 1
            return
        name, args = event.name, RawArgs(event.args)
        if event.cat == "Node" and name.endswith(_NODE_SUFFIX):  # most events: kept short
            raw = args.raw
            op_type, provider = self._text(raw, "op_name"), self._text(raw, "provider")
            node = NodeRecord(
                ts, dur, name[: -len(_NODE_SUFFIX)], op_type, provider, event.tid, args
            )
            self.nodes.append(node)
            return
        self._add_complete(event.cat, name, ts, dur, event.tid, args)

    def _text(self, raw: dict[str, Raw], key: str) -> str:
        """An arg read as text (``str()`` of its value; ``unknown`` when missing), cached by
        its raw text."""
        value = raw.get(key)
        if value is None:
            return "unknown"
        text = bytes(value)
        known = self._texts.get(text)
        if known is None:
            known = self._texts[text] = str(raw_value(value))
        return known

    def _add_complete(
        self,
        category: str,
        name: str,
        ts: float,
        dur: float,
        tid: int | None,
        args: Mapping[str, Any],
    ) -> None:
        """A complete event with valid fields."""
        if category == "Node":
            if name.endswith(_NODE_SUFFIX):
                self.nodes.append(
                    NodeRecord(
                        name=name[: -len(_NODE_SUFFIX)],
                        op_type=str(args.get("op_name", "unknown")),
                        provider=str(args.get("provider", "unknown")),
                        ts=ts,
                        dur=dur,
                        tid=tid,
                        args=args,
                    )
                )
            elif name.endswith(_FENCE_SUFFIXES):
                self.fences += 1
            else:
                self.problems["Node events not named <node>_kernel_time"] += 1
        elif category == "Kernel":
            self.kernels.append(KernelRecord(name=name, ts=ts, dur=dur, args=args))
        elif category == "Session" and name == "model_run":
            self.model_runs.append(RunRecord(index=0, ts=ts, dur=dur, tid=tid))

    def problem_lines(self) -> list[str]:
        lines = [f"{count} events skipped: {why}" for why, count in self.problems.items()]
        if self.fences:
            lines.append(f"{self.fences} fence events (old ORT) not shown as nodes")
        return lines

    def runs(self) -> list[RunRecord]:
        """Nodes and kernels placed in their runs; runs whose ``model_run`` is missing made up.

        An event goes to the latest-starting run whose window contains it. Runs overlap when
        several threads call ``Run`` on one session: a node recorded on a thread that called
        ``Run`` (the sequential executor's nodes) then goes to that thread's run, and to none
        if none of that thread's runs contains it (its own run's ``model_run`` never came).
        Nodes on other threads (the parallel executor's pool) and kernels take any run.
        """
        runs = sorted(self.model_runs, key=lambda run: run.ts)
        windows = _Windows(runs)
        callers = {run.tid for run in runs if run.tid is not None}
        orphans: _Orphans = defaultdict(list)
        items: list[NodeRecord | KernelRecord] = [*self.nodes, *self.kernels]
        for item in items:
            tid = item.tid if isinstance(item, NodeRecord) and item.tid in callers else None
            run = windows.containing(item.ts, tid)
            if run is None:
                orphans[windows.started_before(item.ts), tid].append(item)
            elif isinstance(item, NodeRecord):
                run.nodes.append(item)
            else:
                run.unmatched_kernels.append(item)
        runs += [_incomplete_run(items, tid) for (_, tid), items in _merge_threadless(orphans)]
        runs.sort(key=lambda run: run.ts)
        for index, run in enumerate(runs):
            run.index = index
            run.nodes.sort(key=lambda node: node.ts)
            run.unmatched_kernels = _link_kernels(run.nodes, run.unmatched_kernels)
        return runs


_Orphans = dict[tuple[int, int | None], list[NodeRecord | KernelRecord]]


def _merge_threadless(orphans: _Orphans) -> list[tuple[tuple[int, int | None], list[Any]]]:
    """The events of each gap between runs, by calling thread; the events of no calling
    thread (kernels, pool threads' nodes) join the gap's one calling thread, when it has one
    (else they are a run of their own: whose, the file does not say)."""
    threads: dict[int, list[int]] = defaultdict(list)
    for gap, tid in orphans:
        if tid is not None:
            threads[gap].append(tid)
    merged: _Orphans = {}
    for (gap, tid), items in orphans.items():
        joins = threads[gap][0] if tid is None and len(threads[gap]) == 1 else tid
        merged.setdefault((gap, joins), []).extend(items)
    return sorted(merged.items(), key=lambda entry: (entry[0][0], entry[0][1] or -1))


def _incomplete_run(items: list[NodeRecord | KernelRecord], tid: int | None) -> RunRecord:
    """A run whose ``model_run`` event is missing (the file was cut short): its events' extent."""
    start = min(item.ts for item in items)
    end = max(item.end for item in items)
    run = RunRecord(index=0, ts=start, dur=end - start, tid=tid, complete=False)
    run.nodes = [item for item in items if isinstance(item, NodeRecord)]
    run.unmatched_kernels = [item for item in items if isinstance(item, KernelRecord)]
    return run


def _link_kernels(nodes: list[NodeRecord], kernels: list[KernelRecord]) -> list[KernelRecord]:
    """Attach each kernel to its node: of the name it links to, the latest one starting by
    the kernel's start, else the first (a name repeats: a Loop body's nodes run once per
    iteration); with no link, the node of its op type whose window holds its start. Return
    those no node claims."""
    if not kernels:
        return []
    same_name: dict[str, list[NodeRecord]] = defaultdict(list)
    same_op: dict[str, list[NodeRecord]] = defaultdict(list)
    for each in nodes:  # sorted by start
        same_name[each.name].append(each)
        same_op[each.op_type].append(each)
    by_name = {name: _Windows(named) for name, named in same_name.items()}
    by_op = {op: _Windows(ops) for op, ops in same_op.items()}
    unmatched: list[KernelRecord] = []
    for kernel in kernels:
        named = by_name.get(str(kernel.args.get(_LINK_ARG, "")).removesuffix(_NODE_SUFFIX))
        node: NodeRecord | None
        if named is not None:
            node = named.latest_from(kernel.ts) or named.windows[0]
        else:
            windows = by_op.get(str(kernel.args.get("op_name", "")))
            node = windows.containing(kernel.ts) if windows else None
        if node is None:
            unmatched.append(kernel)
        else:
            node.kernels.append(kernel)
    return unmatched


class _Windows(Generic[_W]):
    """Windows (runs or nodes) sorted by start, for containment look-ups."""

    def __init__(self, windows: list[_W]) -> None:
        self.windows: list[_W] = windows
        self.starts = [each.ts for each in windows]
        self.max_ends: list[float] = []  # max end over windows[0..i]: stops the backward scan
        for each in windows:
            self.max_ends.append(max(each.end, self.max_ends[-1] if self.max_ends else each.end))

    def started_before(self, ts: float) -> int:
        """The index of the last window starting at or before ``ts``; -1 if none does."""
        return bisect.bisect_right(self.starts, ts) - 1

    def latest_from(self, ts: float) -> _W | None:
        """The latest window starting at or before ``ts``."""
        at = bisect.bisect_right(self.starts, ts + _TOLERANCE_US) - 1
        return self.windows[at] if at >= 0 else None

    def containing(self, ts: float, tid: int | None = None) -> _W | None:
        """The latest-starting window that contains ``ts`` (and is on thread ``tid``, if given)."""
        at = bisect.bisect_right(self.starts, ts + _TOLERANCE_US) - 1
        while at >= 0 and self.max_ends[at] + _TOLERANCE_US >= ts:
            each: _W = self.windows[at]
            if each.end + _TOLERANCE_US >= ts and (tid is None or each.tid == tid):
                return each
            at -= 1
        return None


def _start_time(path: str, runs: list[RunRecord]) -> tuple[int, str]:
    match = _FILENAME_TIME.search(os.path.basename(path))
    if match:
        year, month, day, hour, minute, second, millis = map(int, match.groups())
        seconds = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
        return int(seconds) * 1_000_000_000 + millis * 1_000_000, "filename"
    last_end_us = max((run.end for run in runs), default=0.0)
    return os.stat(path).st_mtime_ns - int(last_end_us * 1000), "mtime"

"""Parse one thread's ring-buffer bytes into switch records, samples and loss counts.

Every event otel-ort opens has ``sample_type = IDENTIFIER | TID | TIME`` (the leader adds
``READ`` when it samples) and ``sample_id_all``, so each record names its event and carries a
CLOCK_REALTIME time: a sample starts with the identifier, other records end with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from otel_ort._util.native import NATIVE_WANTED
from otel_ort.perf.kernel import unpack_group

try:
    from otel_ort.perf import _node_counts
except ImportError:  # not built at install: the rings are read with numpy
    _node_counts = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _node_counts = None  # type: ignore[assignment]

_SAMPLE, _SWITCH, _THROTTLE = 9, 14, 5
_PLAIN = np.dtype(  # a switch record or a sparse sample: the only records of 32 bytes
    [("type", "<u4"), ("misc", "<u2"), ("size", "<u2"), ("a", "<u8"), ("b", "<u8"), ("c", "<u8")]
)
_MISC_SWITCH_OUT = 1 << 13
_HEADER = struct.Struct("IHH")
_SAMPLE_HEAD = struct.Struct("QIIQ")  # identifier, pid, tid, time
_TRAILER = struct.Struct("IIQQ")  # pid, tid, time, identifier
_THROTTLE_TIME = struct.Struct("Q")


@dataclass(slots=True)
class GroupSample:
    """A leader sample: when, and the group's raw values (by event id) with its times."""

    time: int
    enabled: int
    running: int
    values: dict[int, int]


@dataclass(slots=True)
class ThreadRecords:
    switches: list[tuple[int, bool]] = field(default_factory=list)
    """(time, switched out?) in ring order."""
    events: dict[int, list[int]] = field(default_factory=dict)
    """Sample times of the sparse events (period 1), by event id."""
    group_samples: list[GroupSample] = field(default_factory=list)
    throttles: list[int] = field(default_factory=list)
    """When the kernel withheld samples until its next tick (counts stay exact)."""

    @property
    def throttled(self) -> int:
        """How many times the kernel withheld samples."""
        return len(self.throttles)


def parse(data: bytes, dense_id: int | None, out: ThreadRecords | None = None) -> ThreadRecords:
    """The records in ``data`` (whole records, as ``Ring.take`` returns them), added to
    ``out``; samples of ``dense_id`` are the dense group's. Losses are not read here: a ring
    that filled up says so (``Ring.filled``); the kernel's LOST record would only come at the
    ring's next write, after the run."""
    out = out if out is not None else ThreadRecords()
    position, end = 0, len(data)
    while position + _HEADER.size <= end:
        kind, misc, size = _HEADER.unpack_from(data, position)
        if size < _HEADER.size or position + size > end:
            break  # a torn record (never seen): nothing after it can be trusted
        body = position + _HEADER.size
        if kind == _SAMPLE:
            identifier, _, _, time = _SAMPLE_HEAD.unpack_from(data, body)
            if identifier == dense_id:
                out.group_samples.append(_group_sample(data, body + _SAMPLE_HEAD.size, time))
            else:
                out.events.setdefault(identifier, []).append(time)
        elif kind == _SWITCH:
            time = _TRAILER.unpack_from(data, position + size - _TRAILER.size)[2]
            out.switches.append((time, bool(misc & _MISC_SWITCH_OUT)))
        elif kind == _THROTTLE:
            out.throttles.append(_THROTTLE_TIME.unpack_from(data, body)[0])
        position += size
    return out


def _group_sample(data: bytes, offset: int, time: int) -> GroupSample:
    return GroupSample(time, *unpack_group(data, offset))


@dataclass(frozen=True, slots=True)
class _Selected:
    """A flight ring's plain records (``data`` newest first) and which of them a window
    needs: those inside it, and the last switch record before it (which says whether the
    thread was on a CPU when the window began)."""

    records: np.ndarray
    switch: np.ndarray
    """Which records are switch records (the others are sparse samples)."""
    times: np.ndarray
    keep: np.ndarray
    reached: bool
    """The records reach back before the window's start (else older ones were overwritten,
    or never were)."""


def _select(data: bytes, window: tuple[int, int]) -> _Selected | None:
    """The records of ``window`` in ``data``; ``None`` when other records than switches and
    sparse samples are among them (throttling): those are parsed one at a time."""
    since, until = window
    plain = _plain_records(data)
    if plain is None:
        return None
    records, switch, times = plain
    count = len(records)
    before = np.flatnonzero(switch & (times < since))
    keep = (times >= since) & (times <= until)
    if len(before):
        keep[before[0]] = True  # the newest switch before the window
    return _Selected(records, switch, times, keep, bool(count) and int(times.min()) < since)


def reaches(data: bytes, since: int, switches: bool) -> bool:
    """Whether ``data`` (a flight ring's first records, the newest first) holds all that a
    window from ``since`` takes from it (``_Selected``): its records go back past ``since``,
    to a switch record in a ring of switches (``switches``). ``False`` when it cannot tell:
    records other than switches and sparse samples, or times that do not fall record after
    record (the clock was set back): then more of the ring is read, up to all of it."""
    if len(data) < _PLAIN.itemsize:  # no record (most sparse events' rings): no numpy
        return False
    if _node_counts is not None:  # in C where it was built, for plain records
        reached = _node_counts.reaches_back(data, since, switches)
        if reached is not NotImplemented:
            return reached
    plain = _plain_records(data)
    if plain is None:
        return False
    _, switch, times = plain
    if len(times) > 1 and bool((times[1:] > times[:-1]).any()):
        return False
    older = times < since
    return bool((older & switch).any() if switches else older.any())


def _plain_records(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``data``'s records, which are switch records, and each one's time; ``None`` when
    other records than switches and sparse samples are among them."""
    records = np.frombuffer(data, _PLAIN, len(data) // _PLAIN.itemsize)
    kinds = records["type"]
    switch = kinds == _SWITCH  # (np.isin cost five times as much for two values, 2026-11-27)
    if (records["size"] != _PLAIN.itemsize).any() or not (switch | (kinds == _SAMPLE)).all():
        return None
    # a switch record ends with pid/tid, time, id; a sample is id, pid/tid, time
    return records, switch, np.where(switch, records["b"], records["c"]).astype(np.int64)


def parse_recent(data: bytes, window: tuple[int, int], out: ThreadRecords) -> bool:
    """The records of a flight ring (``data`` newest first) that ``window`` needs (see
    ``_Selected``), added to ``out``; not the later ones, which may be many by the time the
    ring is read. Whether the records reach back before the window's start."""
    if len(data) < _PLAIN.itemsize:  # no record: nothing to add, nothing reached
        return False
    if _node_counts is not None:  # in C where it was built, for plain records
        parsed = _node_counts.recent_records(data, *window)
        if parsed is not NotImplemented:
            switches, events, reached = parsed
            out.switches.extend(switches)
            for identifier, moments in events.items():
                out.events.setdefault(identifier, []).extend(moments)
            return reached
    selected = _select(data, window)
    if selected is None:
        older = ThreadRecords()
        parse(data, None, older)
        return _keep(older, window, out)
    records, times, keep = selected.records, selected.times, selected.keep
    switched = keep & selected.switch
    out.switches.extend(
        zip(
            times[switched].tolist(),
            (records["misc"][switched] & _MISC_SWITCH_OUT).astype(bool).tolist(),
            strict=True,
        )
    )
    sampled = keep & ~selected.switch
    for identifier in np.unique(records["a"][sampled]).tolist():
        chosen = sampled & (records["a"] == identifier)
        out.events.setdefault(identifier, []).extend(times[chosen].tolist())
    return selected.reached


def _keep(records: ThreadRecords, window: tuple[int, int], out: ThreadRecords) -> bool:
    """``parse_recent`` for records parsed one at a time."""
    since, until = window
    earlier = [switch for switch in records.switches if switch[0] < since]
    out.switches.extend([max(earlier)] if earlier else [])
    out.switches.extend(switch for switch in records.switches if since <= switch[0] <= until)
    for identifier, times in records.events.items():
        out.events.setdefault(identifier, []).extend(t for t in times if since <= t <= until)
    out.throttles.extend(t for t in records.throttles if since <= t <= until)
    oldest = [t for t, _ in records.switches] + [t for ts in records.events.values() for t in ts]
    return bool(oldest) and min(oldest) < since


def trim_recent(data: bytes, window: tuple[int, int]) -> tuple[bytes, bool]:
    """The bytes of the records in ``data`` (a flight ring's, newest first) that
    ``parse_recent`` keeps for ``window``, to hold until they are parsed (32 bytes each,
    where parsed records would take several times that), and whether they reach back before
    the window's start. With other records among them (throttling), all of ``data``."""
    if len(data) < _PLAIN.itemsize:  # no record
        return b"", False
    if _node_counts is not None:  # in C where it was built, for plain records
        trimmed = _node_counts.trimmed_records(data, *window)
        if trimmed is not NotImplemented:
            return trimmed
    selected = _select(data, window)
    if selected is None:
        return data, parse_recent(data, window, ThreadRecords())
    return selected.records[selected.keep].tobytes(), selected.reached

"""Parse one thread's ring-buffer bytes into switch records, samples and loss counts.

Every event otel-ort opens has ``sample_type = IDENTIFIER | TID | TIME`` (the leader adds
``READ`` when it samples) and ``sample_id_all``, so each record names its event and carries a
CLOCK_REALTIME time: a sample starts with the identifier, other records end with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from otel_ort.perf.kernel import unpack_group

_SAMPLE, _SWITCH, _THROTTLE = 9, 14, 5
_MISC_SWITCH_OUT = 1 << 13
_HEADER = struct.Struct("IHH")
_SAMPLE_HEAD = struct.Struct("QIIQ")  # identifier, pid, tid, time
_TRAILER = struct.Struct("IIQQ")  # pid, tid, time, identifier


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
    throttled: int = 0
    """Times the kernel withheld samples until its next tick (counts stay exact)."""


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
            out.throttled += 1
        position += size
    return out


def _group_sample(data: bytes, offset: int, time: int) -> GroupSample:
    return GroupSample(time, *unpack_group(data, offset))

"""Parse one thread's ring-buffer bytes into switch records, samples and loss counts.

Every event otel-ort opens has ``sample_type = IDENTIFIER | TID | TIME`` (the leader adds
``READ`` when it samples) and ``sample_id_all``, so each record names its event and carries a
CLOCK_REALTIME time: a sample starts with the identifier, other records end with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_SAMPLE, _SWITCH, _LOST, _LOST_SAMPLES, _THROTTLE = 9, 14, 2, 13, 5
_MISC_SWITCH_OUT = 1 << 13
_HEADER = struct.Struct("IHH")
_SAMPLE_HEAD = struct.Struct("QIIQ")  # identifier, pid, tid, time
_TRAILER = struct.Struct("IIQQ")  # pid, tid, time, identifier
_READ_HEAD = struct.Struct("QQQ")  # nr, time_enabled, time_running


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
    lost: int = 0
    """Records the kernel dropped because the ring was full (it says so at its next write,
    so losses at the end of a run show only as the ring having filled up)."""
    throttled: int = 0
    """Times the kernel withheld samples until its next tick (counts stay exact)."""


def parse(data: bytes, leader_id: int) -> ThreadRecords:
    """The records in ``data`` (whole records, as ``Ring.take`` returns them)."""
    out = ThreadRecords()
    position, end = 0, len(data)
    while position + _HEADER.size <= end:
        kind, misc, size = _HEADER.unpack_from(data, position)
        if size < _HEADER.size or position + size > end:
            out.lost += 1  # a torn record: nothing after it can be trusted
            break
        body = position + _HEADER.size
        if kind == _SAMPLE:
            identifier, _, _, time = _SAMPLE_HEAD.unpack_from(data, body)
            if identifier == leader_id:
                out.group_samples.append(_group_sample(data, body + _SAMPLE_HEAD.size, time))
            else:
                out.events.setdefault(identifier, []).append(time)
        elif kind == _SWITCH:
            time = _TRAILER.unpack_from(data, position + size - _TRAILER.size)[2]
            out.switches.append((time, bool(misc & _MISC_SWITCH_OUT)))
        elif kind in (_LOST, _LOST_SAMPLES):
            if position:  # a leading one reports the previous run's losses, said then
                out.lost += struct.unpack_from("Q", data, body + (8 if kind == _LOST else 0))[0]
        elif kind == _THROTTLE:
            out.throttled += 1
        position += size
    return out


def _group_sample(data: bytes, offset: int, time: int) -> GroupSample:
    nr, enabled, running = _READ_HEAD.unpack_from(data, offset)
    pairs = struct.unpack_from(f"{2 * nr}Q", data, offset + _READ_HEAD.size)
    return GroupSample(
        time, enabled, running, {pairs[i + 1]: pairs[i] for i in range(0, 2 * nr, 2)}
    )

"""One thread's perf events: a task-clock leader, its members, one ring buffer.

The leader counts task-clock, records the thread's context switches (``context_switch``) and,
when dense events are counted, samples every ``period`` ns of CPU time with the group's values
(``SAMPLE_READ``). Sparse members (faults, migrations) sample every occurrence into the
leader's ring. Dense members (hardware counters, cpu-clock) only count. Members are created
enabled and follow the leader: toggling the leader alone turns the group on and off (the
kernel quirk in ``probe.py`` is why the group-wide toggle is not used).
"""

from __future__ import annotations

import contextlib
import os
import time

from otel_ort.perf import kernel
from otel_ort.perf.attribution import Read
from otel_ort.perf.events import EventSpec

_SAMPLE_TYPE = kernel.SAMPLE_IDENTIFIER | kernel.SAMPLE_TID | kernel.SAMPLE_TIME
_FLAGS = kernel.SAMPLE_ID_ALL | kernel.EXCLUDE_HV


class ThreadGroup:
    """The events of thread ``tid``; ``ids`` maps each alias to its event id."""

    def __init__(
        self,
        tid: int,
        time_alias: str,
        members: tuple[EventSpec, ...],
        *,
        period_ns: int,
        exclude_kernel: bool,
        pages: int,
    ) -> None:
        self.tid = tid
        self._fds: list[int] = []
        self._ring: kernel.Ring | None = None
        flags = _FLAGS | (kernel.EXCLUDE_KERNEL if exclude_kernel else 0)
        try:
            leader = kernel.Attr(
                kernel.TYPE_SOFTWARE,
                kernel.SW_TASK_CLOCK,
                sample_period=period_ns,
                sample_type=_SAMPLE_TYPE | (kernel.SAMPLE_READ if period_ns else 0),
                read_format=kernel.GROUP_READ_FORMAT,
                flags=flags | kernel.DISABLED | kernel.CONTEXT_SWITCH,
            )
            self.leader = self._open(leader, -1)
            self._ring = kernel.Ring(self.leader, pages)
            self.ids = {time_alias: kernel.event_id(self.leader)}
            for spec in members:
                sparse = spec.kind == "sparse"
                attr = kernel.Attr(
                    spec.type,
                    spec.config,
                    spec.config1,
                    spec.config2,
                    sample_period=1 if sparse else 0,
                    sample_type=_SAMPLE_TYPE,
                    read_format=kernel.GROUP_READ_FORMAT,
                    flags=flags,
                )
                fd = self._open(attr, self.leader)
                if sparse:
                    kernel.ioctl(fd, kernel.IOC_SET_OUTPUT, self.leader)
                self.ids[spec.alias] = kernel.event_id(fd)
        except BaseException:
            self.close()
            raise

    def _open(self, attr: kernel.Attr, group: int) -> int:
        fd = kernel.perf_event_open(attr, self.tid, group)
        self._fds.append(fd)
        return fd

    def read(self) -> Read:
        enabled, running, values = kernel.read_group(self.leader, len(self._fds))
        return Read(enabled, running, values)

    def enable(self) -> int:
        """Start counting; when (ns, CLOCK_REALTIME)."""
        kernel.ioctl(self.leader, kernel.IOC_ENABLE)
        return time.time_ns()

    def disable(self) -> int:
        """Stop counting; when."""
        stopped = time.time_ns()
        kernel.ioctl(self.leader, kernel.IOC_DISABLE)
        return stopped

    def take(self) -> tuple[bytes, bool]:
        """The records written while enabled (call after ``disable``), and whether the ring
        filled up (the kernel then dropped what came after)."""
        assert self._ring is not None
        return self._ring.take(), self._ring.filled

    def alive(self) -> bool:
        return os.path.exists(f"/proc/self/task/{self.tid}")

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

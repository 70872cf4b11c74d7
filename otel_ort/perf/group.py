"""One thread's perf events: a software group, always counting, and for dense counters a
sampled group switched on for profiled runs.

- The software group is led by task-clock, which only counts and writes a record at every
  context switch of the thread (``context_switch``). Its sparse members (faults, migrations)
  sample every occurrence (period 1), each into its own ring, so that a burst of faults cannot
  crowd out the switch records. Software events are never multiplexed. The group counts from
  the moment it is opened, into flight rings (``kernel.FlightRing``) that always hold the
  latest records: a profiled run takes the records of its window afterwards, so no thread
  switches anything on or off (another thread's switch costs an interrupt to its CPU).
- The dense group (only when dense events are counted) is led by cpu-clock sampling every
  ``period`` ns of CPU time with the group's values (``SAMPLE_READ``); its members are the
  hardware, raw and PMU counters. Its samples would cost every run, so it is switched on for
  profiled runs only. The kernel schedules it all-or-nothing and may multiplex it with other
  users of the PMU, which its time enabled / time running then show.

Members are created enabled and follow their leader: only the dense leader is toggled.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from otel_ort.perf import kernel
from otel_ort.perf.attribution import Read
from otel_ort.perf.events import EventSpec
from otel_ort.perf.records import reaches

_SAMPLE_TYPE = kernel.SAMPLE_IDENTIFIER | kernel.SAMPLE_TID | kernel.SAMPLE_TIME
_FLAGS = kernel.SAMPLE_ID_ALL | kernel.EXCLUDE_HV
_CPU_CLOCK = EventSpec("cpu-clock", "cpu-clock", kernel.TYPE_SOFTWARE, 0, unit="ns")
SWITCH_PAGES = 16
"""The switch records' ring: 64 KiB, about 2,000 context switches per run."""
SWITCHES = "switches"
"""What the leader's ring holds (its context switch records), in ``Taken.holds``."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What one ring held after a run: its bytes and what it records (``switches``,
    ``dense`` or a sparse alias)."""

    data: bytes
    holds: str
    filled: bool = False
    """A dense ring filled up: the kernel dropped what came after."""
    since_open: bool | None = None
    """A flight ring's records (the newest first): whether they are every record since its
    event was opened; ``None`` for a dense ring's."""


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
        self._time_alias = time_alias
        self._lock = threading.Lock()
        """Held by each use of the fds and rings, and by ``close``: a group closed by another
        thread (at shutdown) fails the use cleanly, not on fds reused or memory unmapped."""
        self._owned = _Owned()
        self._fds, self._rings = self._owned.fds, self._owned.rings
        # a thread-local group closes when its thread ends; not at interpreter exit, where the
        # profiler's shutdown settles the last runs first (the process's end closes the rest)
        weakref.finalize(self, self._owned.close).atexit = False
        self._flags = _FLAGS | (kernel.EXCLUDE_KERNEL if exclude_kernel else 0)
        self.dense_leader: int | None = None
        self.dense_id: int | None = None
        self.frozen: Read | None = None
        """The dense group's values read after it was last disabled: they hold until it is
        enabled again (saves a read at the next run's start)."""
        try:
            task_clock = EventSpec(
                time_alias, time_alias, kernel.TYPE_SOFTWARE, kernel.SW_TASK_CLOCK
            )
            flight = kernel.WRITE_BACKWARD
            self.leader = self._open(
                task_clock, -1, kernel.DISABLED | flight | kernel.CONTEXT_SWITCH
            )
            self._switches = kernel.FlightRing(self.leader, min(pages, SWITCH_PAGES))
            self._rings.append((self._switches, SWITCHES))
            self.ids = {time_alias: kernel.event_id(self.leader)}
            self._software = 1
            for spec in members:
                if spec.kind == "sparse":
                    fd = self._open(spec, self.leader, flight, sample_period=1)
                    self._rings.append((kernel.FlightRing(fd, pages), spec.alias))
                    self.ids[spec.alias] = kernel.event_id(fd)
                    self._software += 1
            # enabled once whole: members added to a running group would count only from the
            # thread's next switch
            kernel.ioctl(self.leader, kernel.IOC_ENABLE)
            dense = [spec for spec in members if spec.kind == "dense"]
            if dense:
                self._open_dense(dense, period_ns, pages)
        except BaseException:
            self.close()
            raise

    def _open_dense(self, dense: list[EventSpec], period_ns: int, pages: int) -> None:
        leader_spec = next((s for s in dense if (s.type, s.config) == (1, 0)), _CPU_CLOCK)
        leader = self._open(
            leader_spec, -1, kernel.DISABLED, sample_period=period_ns, read=kernel.SAMPLE_READ
        )
        self.dense_leader = leader
        self.dense_id = kernel.event_id(leader)
        self._rings.append((kernel.Ring(leader, pages), "dense"))
        self.dense_members = 1
        if leader_spec is not _CPU_CLOCK:
            self.ids[leader_spec.alias] = self.dense_id
        for spec in dense:
            if spec is not leader_spec:
                self.ids[spec.alias] = kernel.event_id(self._open(spec, leader))
                self.dense_members += 1

    def _open(
        self, spec: EventSpec, group: int, flags: int = 0, sample_period: int = 0, read: int = 0
    ) -> int:
        attr = kernel.Attr(
            spec.type,
            spec.config,
            spec.config1,
            spec.config2,
            sample_period=sample_period,
            sample_type=_SAMPLE_TYPE | read,
            read_format=kernel.GROUP_READ_FORMAT,
            flags=self._flags | flags,
        )
        fd = kernel.perf_event_open(attr, self.tid, group)
        self._fds.append(fd)
        return fd

    def read(self) -> Read | None:
        """The dense group's values (``None`` without dense events: nothing to read)."""
        if self.dense_leader is None:
            return None
        with self._lock:
            self._check_open()
            return Read(*kernel.read_group(self.dense_leader, self.dense_members))

    def start(self) -> int:
        """A counted window starts: when (ns, CLOCK_REALTIME); the dense group starts
        counting. Another thread's dense group is stamped before its switch, as ``stop``
        does: the ioctl's return may wait for the GIL (milliseconds, under load) while that
        thread runs on, counted. The calling thread's own is stamped after it: that thread
        counts nothing until then."""
        stamp = self._switch(kernel.IOC_ENABLE)
        return time.time_ns() if self.tid == threading.get_native_id() else stamp

    def stop(self) -> int:
        """The window ends: when; the dense group stops counting."""
        return self._switch(kernel.IOC_DISABLE)

    def _switch(self, request: int) -> int:
        """Enable or disable the dense leader (``request``), if any; when, just before."""
        stamp = time.time_ns()
        if self.dense_leader is None:
            self._check_open()  # a window of closed events would count nothing
        else:
            with self._lock:
                self._check_open()
                kernel.ioctl(self.dense_leader, request)
        return stamp

    def never_switched(self) -> bool:
        """The thread has not switched in or out since its events were opened."""
        with self._lock:
            self._check_open()
            return self._switches.empty()

    def mostly_on_cpu(self) -> bool:
        """Whether the thread was on a CPU for most of the time since its events were opened
        (its task-clock against the time enabled): for a thread that never switched, on a CPU
        throughout or never. A read of another thread's events may interrupt its CPU: the
        worker's cost, not a run's."""
        with self._lock:
            self._check_open()
            enabled, _, values = kernel.read_group(self.leader, self._software)
        return 2 * values.get(self.ids[self._time_alias], 0) > enabled

    def take(self, since: int | None = None) -> tuple[Taken, ...]:
        """What each ring holds: a flight ring's latest records (taking nothing from it; with
        ``since``, those a window from that time needs, and a few more), a dense ring's
        records since the last call (freed: the only reader)."""
        with self._lock:
            self._check_open()
            return tuple(
                Taken(ring.take(), holds, filled=ring.filled)
                if isinstance(ring, kernel.Ring)
                else Taken(
                    (recent := ring.recent(_enough(since, holds))).data,
                    holds,
                    since_open=recent.since_open,
                )
                for ring, holds in self._rings
            )

    def discard(self) -> None:
        """Free what the dense ring holds without copying it."""
        with self._lock:
            self._check_open()
            for ring, _ in self._rings:
                if isinstance(ring, kernel.Ring):
                    ring.discard()

    def _check_open(self) -> None:
        if not self._fds:
            raise OSError(errno.EBADF, f"the perf events of thread {self.tid} are closed")

    def close(self, *, forked_child: bool = False) -> None:
        """Close the fds and rings (in a forked child: without the lock, which a parent's
        thread may have held at the fork)."""
        with contextlib.nullcontext() if forked_child else self._lock:
            self._owned.close()


@dataclass(eq=False)
class _Owned:
    """A group's fds and mappings (apart, so that a finalizer can close them)."""

    fds: list[int] = field(default_factory=list)
    rings: list[tuple[kernel.Ring | kernel.FlightRing, str]] = field(default_factory=list)

    def close(self) -> None:
        for ring, _ in self.rings:
            ring.close()
        self.rings.clear()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _enough(since: int | None, holds: str) -> Callable[[bytes], bool] | None:
    """When a flight ring's newest records are all a window from ``since`` needs
    (``None``: all of them are wanted)."""
    if since is None:
        return None
    return functools.partial(reaches, since=since, switches=holds == SWITCHES)

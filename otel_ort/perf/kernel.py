"""The Linux perf_event_open interface through cffi (ABI mode): attributes, fds, ring buffers.

Only what otel-ort uses: per-thread events (``pid`` = a thread id, ``cpu`` = -1), groups led by
one event, a ring buffer for each sampling event (read and freed, or overwritten by the kernel
and only read), group reads. Layouts and
numbers are those of ``linux/perf_event.h`` (stable kernel ABI); see FACTS.md.
"""

from __future__ import annotations

import errno
import mmap
import os
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass

import cffi  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev env

ffi = cffi.FFI()
ffi.cdef(
    """
    long syscall(long number, ...);
    int ioctl(int fd, unsigned long request, ...);
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
    int munmap(void *addr, size_t length);
    """
)
_libc = ffi.dlopen(None)

_SYSCALL = {"x86_64": 298, "aarch64": 241}.get(platform.machine())
_FLAG_FD_CLOEXEC = 8

TYPE_SOFTWARE = 1
SW_TASK_CLOCK = 1

ATTR_SIZE = 136
# struct perf_event_attr: (offset, format) of the fields set here
_TYPE, _SIZE, _CONFIG, _PERIOD, _SAMPLE_TYPE, _READ_FORMAT, _FLAGS = (
    (0, "I"), (4, "I"), (8, "Q"), (16, "Q"), (24, "Q"), (32, "Q"), (40, "Q"),
)  # fmt: skip
_CONFIG1, _CONFIG2, _CLOCKID = (56, "Q"), (64, "Q"), (92, "i")

# attr flag bits
DISABLED = 1 << 0
EXCLUDE_KERNEL = 1 << 5
EXCLUDE_HV = 1 << 6
SAMPLE_ID_ALL = 1 << 18
USE_CLOCKID = 1 << 25
CONTEXT_SWITCH = 1 << 26
WRITE_BACKWARD = 1 << 27

# sample_type bits
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_READ = 1 << 4
SAMPLE_IDENTIFIER = 1 << 16

# read_format bits
READ_TIMES = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
READ_ID = 4
READ_GROUP = 8
GROUP_READ_FORMAT = READ_TIMES | READ_ID | READ_GROUP

CLOCK_REALTIME = 0

IOC_ENABLE = 0x2400
IOC_DISABLE = 0x2401
IOC_ID = 0x80082407

_MAX_RECORD = 512
"""Bytes: more than any record otel-ort's events write."""
_FIRST_READ = 8192
"""Bytes of a flight ring read first when only its newest records are wanted (a multiple of
every record size that matters: 32)."""

# mmap'ed control page
_DATA_HEAD, _DATA_TAIL, _DATA_OFFSET, _DATA_SIZE = 1024, 1032, 1040, 1048


class PerfOpenError(OSError):
    """``perf_event_open`` refused an event; ``errno`` says why."""


class RingError(OSError):
    """A perf ring buffer could not be mapped (the locked-memory limit for perf buffers)."""


@dataclass(frozen=True, slots=True)
class Attr:
    """The ``perf_event_attr`` fields otel-ort sets; everything else is zero."""

    type: int
    config: int
    config1: int = 0
    config2: int = 0
    sample_period: int = 0
    sample_type: int = 0
    read_format: int = 0
    flags: int = 0

    def pack(self) -> bytearray:
        buffer = bytearray(ATTR_SIZE)
        for (offset, fmt), value in (
            (_TYPE, self.type),
            (_SIZE, ATTR_SIZE),
            (_CONFIG, self.config),
            (_PERIOD, self.sample_period),
            (_SAMPLE_TYPE, self.sample_type),
            (_READ_FORMAT, self.read_format),
            (_FLAGS, self.flags | USE_CLOCKID),
            (_CONFIG1, self.config1),
            (_CONFIG2, self.config2),
            (_CLOCKID, CLOCK_REALTIME),
        ):
            struct.pack_into(fmt, buffer, offset, value)
        return buffer


def perf_event_open(attr: Attr, tid: int, group_fd: int = -1) -> int:
    """Open ``attr`` on thread ``tid`` (any CPU); the fd is close-on-exec."""
    if _SYSCALL is None:
        raise PerfOpenError(
            errno.ENOSYS, f"perf_event_open: unsupported machine {platform.machine()}"
        )
    buffer = attr.pack()
    fd = _libc.syscall(
        _SYSCALL,
        ffi.cast("void *", ffi.from_buffer(buffer)),
        ffi.cast("int", tid),
        ffi.cast("int", -1),
        ffi.cast("int", group_fd),
        ffi.cast("unsigned long", _FLAG_FD_CLOEXEC),
    )
    if fd < 0:
        code = ffi.errno
        raise PerfOpenError(code, os.strerror(code))
    return int(fd)


def ioctl(fd: int, request: int, argument: int = 0) -> None:
    if (
        _libc.ioctl(
            ffi.cast("int", fd), ffi.cast("unsigned long", request), ffi.cast("long", argument)
        )
        < 0
    ):
        code = ffi.errno
        raise OSError(code, f"perf ioctl {request:#x}: {os.strerror(code)}")


def event_id(fd: int) -> int:
    """The kernel's id of the event behind ``fd`` (what group reads and samples name)."""
    out = ffi.new("uint64_t *")
    if _libc.ioctl(ffi.cast("int", fd), ffi.cast("unsigned long", IOC_ID), out) < 0:
        code = ffi.errno
        raise OSError(code, f"PERF_EVENT_IOC_ID: {os.strerror(code)}")
    return int(out[0])


def read_group(fd: int, members: int) -> tuple[int, int, dict[int, int]]:
    """A group read through its leader: (time_enabled, time_running, {event id: value})."""
    return unpack_group(os.read(fd, 8 * (3 + 2 * members)), 0)


def unpack_group(data: bytes, offset: int) -> tuple[int, int, dict[int, int]]:
    """The ``GROUP_READ_FORMAT`` layout at ``offset``, as ``read_group`` returns it."""
    nr, enabled, running = struct.unpack_from("QQQ", data, offset)
    values = struct.unpack_from(f"{2 * nr}Q", data, offset + 24)
    return enabled, running, {values[i + 1]: values[i] for i in range(0, 2 * nr, 2)}


class _Mapping:
    """``1 + pages`` pages of a leader's ring buffer, mapped with libc's ``mmap``, not Python's:
    the kernel does not copy a perf mapping into a forked child, so there its address range
    may hold the child's own memory by the time the ring is closed, and Python's ``mmap`` would
    unmap that (a crash). Only the process that mapped a ring unmaps it."""

    def __init__(self, fd: int, pages: int, prot: int) -> None:
        self._page = mmap.PAGESIZE
        self._length = (1 + pages) * self._page
        address = _libc.mmap(ffi.NULL, self._length, prot, mmap.MAP_SHARED, fd, 0)
        if address == ffi.cast("void *", -1):  # MAP_FAILED
            code = ffi.errno
            raise RingError(code, os.strerror(code))
        self._address = address
        self._pid = os.getpid()
        self._map = ffi.buffer(address, self._length)
        self.size = pages * self._page

    def _data(self, position: int, length: int) -> bytes:
        """``length`` bytes of the data area from ``position`` (any offset: it wraps)."""
        offset = struct.unpack_from("Q", self._map, _DATA_OFFSET)[0] or self._page
        start = offset + position % self.size
        data: bytes
        if start + length <= offset + self.size:
            data = self._map[start : start + length]
        else:
            wrapped = start + length - self.size
            data = self._map[start : offset + self.size] + self._map[offset:wrapped]
        return data

    def close(self) -> None:
        if self._address is None:
            return
        if os.getpid() == self._pid:
            _libc.munmap(self._address, self._length)
        self._address = self._map = None

    def _check_open(self) -> None:
        if self._address is None:
            raise ValueError("the perf ring buffer is closed")


class Ring(_Mapping):
    """A ring the kernel fills and otel-ort empties (mapped writable: the kernel never
    overwrites what was not read, and drops what does not fit)."""

    def __init__(self, fd: int, pages: int) -> None:
        super().__init__(fd, pages, mmap.PROT_READ | mmap.PROT_WRITE)
        self.filled = False
        """The last ``take`` found the ring (nearly) full: records after that were dropped."""

    def take(self) -> bytes:
        """The records written since the last call, and free them (the only reader: the kernel
        publishes a record's place only once it is whole, and never overwrites unread ones)."""
        self._check_open()
        head, tail = struct.unpack_from("QQ", self._map, _DATA_HEAD)
        self.filled = head - tail > self.size - _MAX_RECORD
        data = self._data(tail, min(head - tail, self.size))
        struct.pack_into("Q", self._map, _DATA_TAIL, head)
        return data

    def discard(self) -> None:
        """Free the records written so far, unread."""
        self._check_open()
        head = struct.unpack_from("Q", self._map, _DATA_HEAD)[0]
        struct.pack_into("Q", self._map, _DATA_TAIL, head)
        self.filled = False


@dataclass(frozen=True, slots=True)
class Recent:
    """What a flight ring held: whole records, the newest first."""

    data: bytes
    since_open: bool
    """They are every record since the event was opened (none was overwritten yet)."""


class FlightRing(_Mapping):
    """A ring the kernel overwrites, the oldest record first (``write_backward``, mapped
    read-only): it always holds the latest records, and reading it takes nothing from it, so
    nobody has to switch it on, off or empty it."""

    def __init__(self, fd: int, pages: int) -> None:
        super().__init__(fd, pages, mmap.PROT_READ)

    def empty(self) -> bool:
        """Nothing was ever written to it."""
        self._check_open()
        head: int = struct.unpack_from("Q", self._map, _DATA_HEAD)[0]
        return head == 0

    def recent(self, enough: Callable[[bytes], bool] | None = None) -> Recent:
        """The records it holds now, the newest first; with ``enough``, only as many as it
        takes for ``enough(records)`` to be true (read in growing steps), or all. The kernel
        writes on meanwhile, each new record over the oldest: the bytes it wrote while they
        were copied are cut off the old end, and so is room for one more record, which it may
        be writing there before it moves the head."""
        self._check_open()
        head = struct.unpack_from("Q", self._map, _DATA_HEAD)[0]
        written = -head % (1 << 64)  # the head moves down from 0
        held = min(written, self.size)
        length = held if enough is None else min(held, _FIRST_READ)
        data = self._data(head, length)
        while length < held and enough is not None and not enough(data):
            length = min(held, 4 * length)
            data = self._data(head, length)
        moved = (head - struct.unpack_from("Q", self._map, _DATA_HEAD)[0]) % (1 << 64)
        if length + moved + _MAX_RECORD <= self.size:  # nothing of it was written over
            return Recent(data, length == written)
        return Recent(data[: max(0, min(length, self.size - moved - _MAX_RECORD))], False)

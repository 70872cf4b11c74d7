"""Objects over a pipe between otel-ort's own two processes: each a pickle after its length.

Only the instrumented process and the conversion process it started read these frames, so
unpickling them trusts nothing it did not write. Reading and writing are system calls on raw
file descriptors: the GIL is let go while they wait.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time

_LENGTH = struct.Struct("<Q")
_FIRST_BUFFER = 1 << 20
"""How much of a frame's announced length is allocated before its bytes come (the answer
for a run of a few hundred nodes fits): a length read from something else than a frame (a
stray print) must not allocate it all."""


class FrameTimeout(TimeoutError):
    """No whole frame came in time."""


def write_frame(fd: int, value: object, timeout_s: float | None = None) -> None:
    """Write ``value`` as one frame (``OSError`` when the other end is gone). With
    ``timeout_s`` (``fd`` non-blocking), ``FrameTimeout`` when the other end has not taken
    it all by then."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            if deadline is None or not _waited(fd, select.POLLOUT, deadline):
                raise FrameTimeout(
                    f"the frame was not taken in time ({len(view)} bytes left)"
                ) from None
            continue
        view = view[written:]


def read_frame(fd: int, timeout_s: float | None = None) -> object | None:
    """The next frame's value; ``None`` when the other end closed between frames.
    ``EOFError`` when it closed inside one, ``FrameTimeout`` after ``timeout_s``."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    head = _read(fd, _LENGTH.size, deadline, at_start=True)
    if head is None:
        return None
    (length,) = _LENGTH.unpack(head)
    body = _read(fd, length, deadline, at_start=False)
    assert body is not None
    value: object = pickle.loads(body)
    return value


def readable(fd: int) -> bool:
    """Whether reading ``fd`` would not wait (data, or the other end closed)."""
    return _waited(fd, select.POLLIN, time.monotonic())


def _waited(fd: int, event: int, deadline: float) -> bool:
    """Wait until ``fd`` is ready for ``event`` (or its other end closed), at most until
    ``deadline`` (monotonic); whether it is. ``poll``: ``select`` cannot take descriptors
    over 1023."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, deadline - time.monotonic()) * 1000))


def _read(fd: int, size: int, deadline: float | None, at_start: bool) -> bytearray | None:
    """``size`` bytes read into one buffer, made at once up to ``_FIRST_BUFFER`` (growing
    copies and a final ``bytes`` copy cost the worker 0.2 ms a recogniser run's answer,
    2026-11-27)."""
    data = bytearray(min(size, _FIRST_BUFFER))
    got = 0
    while got < size:
        if got == len(data):  # longer than its first buffer: it grows as its bytes come
            data.extend(bytes(min(size - got, len(data))))
        if deadline is not None and not _waited(fd, select.POLLIN, deadline):
            raise FrameTimeout(f"no answer within the time allowed ({got} bytes read)")
        with memoryview(data) as view, view[got:] as free:  # released: then it can grow
            read = os.readv(fd, [free])
        if not read:
            if at_start and not got:
                return None
            raise EOFError(f"the pipe closed inside a frame ({got} of {size} bytes)")
        got += read
    return data

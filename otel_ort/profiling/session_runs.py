"""Each instrumented session's runs in flight, and the gate of its first profiled run.

ORT's thread-pool profiler is not safe to switch on while the pool serves other runs: a
session's first profiled run, concurrent with other runs of that session that use its
intra-op pool, makes *those* runs fail ("ThreadPoolProfiler ... LogStart must pair with
LogEnd"). Once one profiled run has completed alone, profiled and unprofiled runs of the
session mix safely. So a session's first profiled run waits until its runs in flight end,
and runs arriving meanwhile wait until it ends (``begin_profiled``).

The same bookkeeping counts the runs that overlapped a profiled run: they share the session's
intra-op pool, so the pool threads' perf counts include their work.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from otel_ort.forking import after_fork_in_child

_KEY = "_otel_ort_runs"
_THREADS_KEY = "_otel_ort_pool_threads"
DEFAULT_NODES = 64
"""A session's nodes per run until its first profile has been read."""
GATE_TIMEOUT_S = 5.0
"""How long a session's first profiled run waits for the session's runs in flight to end
before it gives up (the run then goes ahead unprofiled)."""


@dataclass(frozen=True, slots=True)
class Window:
    """A profiled run as it began: what was in flight, and whether it is the session's
    first (run alone)."""

    in_flight: int
    started: int
    first: bool


class _Process:
    """Which process the counts belong to: a forked child's runs start afresh (the parent's
    in flight are not its own, and its threads are gone)."""

    generation = 0

    def forked(self) -> None:
        self.generation += 1


_PROCESS = _Process()
after_fork_in_child(_PROCESS, _Process.forked)


class SessionRuns:
    """One session's runs in flight (in ``session.__dict__``). An unprofiled run costs two
    acquisitions of an uncontended lock."""

    __slots__ = (
        "_changed",
        "_lock",
        "_priming",
        "fixed",
        "generation",
        "in_flight",
        "nodes",
        "primed",
        "started",
    )

    def __init__(self) -> None:
        self.generation = _PROCESS.generation
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified when the runs in flight fall to none during priming, and when it ends."""
        self.in_flight = 0
        self.started = 0
        self.nodes = DEFAULT_NODES
        """Nodes per run, from the session's last profile (for ``pool_log``)."""
        self.primed = False
        """A profiled run of this session has completed alone."""
        self.fixed: object = None
        """What the profiler read of the session on its first selected run."""
        self._priming = False

    def enter(self) -> None:
        """An unprofiled run begins (after the first profiled run, if one is under way)."""
        with self._lock:
            if not self._priming:
                self.in_flight += 1
                self.started += 1
                return
        with self._changed:
            while self._priming:
                self._changed.wait()
            self.in_flight += 1
            self.started += 1

    def leave(self) -> None:
        """A run has ended (returned, raised, or called back)."""
        with self._lock:
            self.in_flight -= 1
            if self._priming and self.in_flight == 0:
                self._changed.notify_all()

    def begin_profiled(self, timeout: float = GATE_TIMEOUT_S) -> Window | None:
        """A profiled run begins; the session's first one once the runs in flight have
        ended, holding new runs back until ``end_profiled``. ``None``: they had not ended
        within ``timeout`` seconds (nothing is held back; the run is not to be profiled)."""
        with self._changed:
            while self._priming:  # another thread's first profiled run: after it
                self._changed.wait()
            first = not self.primed
            if first:
                self._priming = True
                if not self._changed.wait_for(lambda: self.in_flight == 0, timeout):
                    self._priming = False
                    self._changed.notify_all()
                    return None
            window = Window(self.in_flight, self.started, first)
            self.in_flight += 1
            self.started += 1
            return window

    def end_profiled(self, window: Window) -> int:
        """The profiled run begun as ``window`` has ended; how many other runs of the session
        overlapped it."""
        with self._changed:
            self.in_flight -= 1
            overlapping = window.in_flight + self.started - window.started - 1
            if window.first:
                self.primed = True
                self._priming = False
                self._changed.notify_all()
            return overlapping


def session_runs(session: Any) -> SessionRuns:
    """The session's ``SessionRuns``, made on its first run (sessions made before
    ``instrument()`` too), and again in a forked child."""
    runs: SessionRuns | None = session.__dict__.get(_KEY)
    if runs is None or runs.generation != _PROCESS.generation:
        fresh = SessionRuns()
        runs = session.__dict__.setdefault(_KEY, fresh)
        if runs.generation != fresh.generation:  # the parent's, in a forked child
            runs = session.__dict__[_KEY] = fresh
    return runs


def live_thread_ids() -> set[int]:
    """The OS thread ids of this process's threads."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def note_pool_threads(session: Any, before: set[int]) -> None:
    """After the session's constructor: the threads that appeared while it ran, but for Python
    threads (ORT's intra-op pool threads live as long as their session)."""
    python_threads = {thread.native_id for thread in threading.enumerate()}
    session.__dict__[_THREADS_KEY] = tuple(sorted(live_thread_ids() - before - python_threads))


def pool_threads(session: Any) -> tuple[int, ...] | None:
    """The session's intra-op pool threads; ``None`` if it was made before ``instrument()``."""
    threads: tuple[int, ...] | None = session.__dict__.get(_THREADS_KEY)
    return threads

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
import time
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
BUSY_BACKOFF_S = 60.0
"""After a first profiled run gave up waiting, how long the session's selected runs go
unprofiled without waiting (``session_busy``) before one tries again."""


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
    _global_pool: SessionRuns | None = None
    _lock = threading.Lock()

    def forked(self) -> None:
        self.generation += 1
        self._lock = threading.Lock()

    def global_pool_runs(self) -> SessionRuns:
        """The runs of every session on ORT's global thread pool (this process's)."""
        with self._lock:
            runs = self._global_pool
            if runs is None or runs.generation != self.generation:
                runs = self._global_pool = SessionRuns()
            return runs


_PROCESS = _Process()
after_fork_in_child(_PROCESS, _Process.forked)


class SessionRuns:
    """One session's runs in flight (in ``session.__dict__``). An unprofiled run costs two
    acquisitions of an uncontended lock."""

    __slots__ = (
        "_busy_until",
        "_changed",
        "_lock",
        "_priming",
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
        self._priming = False
        self._busy_until = 0.0
        """(``time.monotonic()``) Until when a first profiled run is not tried again, after
        one waited in vain for the session's runs in flight."""

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
                if time.monotonic() < self._busy_until:
                    return None  # its last try waited in vain: not again yet
                self._priming = True
                try:
                    alone = self._changed.wait_for(lambda: self.in_flight == 0, timeout)
                except BaseException:  # KeyboardInterrupt: the session must not stay held
                    self._unprime()
                    raise
                if not alone:
                    self._busy_until = time.monotonic() + BUSY_BACKOFF_S
                    self._unprime()
                    return None
            window = Window(self.in_flight, self.started, first)
            self.in_flight += 1
            self.started += 1
            return window

    def end_profiled(self, window: Window, *, completed: bool = True) -> int:
        """The profiled run begun as ``window`` has ended (``completed``: ORT returned; a run
        that raised may not have started the pool's profiler, so a first one that raised
        leaves the next one first); how many other runs of the session overlapped it."""
        with self._changed:
            self.in_flight -= 1
            overlapping = window.in_flight + self.started - window.started - 1
            if window.first:
                self.primed = completed
                self._unprime()
            return overlapping

    def _unprime(self) -> None:
        """(holding the lock) The first profiled run is over: runs held back go."""
        self._priming = False
        self._changed.notify_all()


def session_runs(session: Any) -> SessionRuns:
    """The session's ``SessionRuns``, made on its first run (sessions made before
    ``instrument()`` too), and again in a forked child. Sessions on ORT's global thread pool
    (``use_per_session_threads`` off) share one: they share the pool, whose profiler a
    first profiled run of any of them switches on."""
    runs: SessionRuns | None = session.__dict__.get(_KEY)
    if runs is None or runs.generation != _PROCESS.generation:
        fresh = _PROCESS.global_pool_runs() if _on_global_pool(session) else SessionRuns()
        runs = session.__dict__.setdefault(_KEY, fresh)
        if runs.generation != fresh.generation:  # the parent's, in a forked child
            runs = session.__dict__[_KEY] = fresh
    return runs


def _on_global_pool(session: Any) -> bool:
    options = getattr(session, "_sess_options", None)
    return options is not None and not getattr(options, "use_per_session_threads", True)


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

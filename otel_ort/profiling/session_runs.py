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

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from otel_ort._util.forking import after_fork_in_child

RUNS_ATTR = "_otel_ort_runs"
"""Where a session's ``SessionRuns`` is kept, in its ``__dict__``."""
_THREADS_KEY = "_otel_ort_pool_threads"
DEFAULT_NODES = 64
"""A session's nodes per run until its first profile has been read."""
GATE_TIMEOUT_S = 5.0
"""How long a session's first profiled run waits for the session's runs in flight to end
before it gives up (the run then goes ahead unprofiled)."""
BUSY_BACKOFF_S = 60.0
"""After a first profiled run gave up waiting, how long the session's selected runs go
unprofiled without waiting (``session_busy``) before one tries again."""


@dataclass(slots=True)  # not frozen: made on the request thread (a frozen one's __init__ is slower)
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
                runs = self._global_pool = _RUNS_CLASS()
            return runs


PROCESS = _Process()
after_fork_in_child(PROCESS, _Process.forked)


class SessionRuns:
    """One session's runs in flight (in ``session.__dict__``).

    An unprofiled run takes no lock: it counts itself in and out with ``next()`` on two
    ``itertools.count`` objects (one atomic step each under the GIL), reading ``priming``
    after each (:meth:`enter`, :meth:`leave`; the run wrapper inlines them). The counts are
    read under the lock, by ``next()`` too: each read takes one of each count, and ``_reads``
    says how many were reads. A build without the GIL gets :class:`_LockedSessionRuns`.
    """

    __slots__ = (
        "_busy_until",
        "_changed",
        "_ends",
        "_held",
        "_lock",
        "_reads",
        "_starts",
        "count_in",
        "count_out",
        "generation",
        "nodes",
        "primed",
        "priming",
    )

    def __init__(self) -> None:
        self.generation = PROCESS.generation
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified when a run ends or is held during priming, and when priming ends."""
        self._starts = itertools.count()
        self._ends = itertools.count()
        self.count_in: Callable[[], object] = self._starts.__next__
        """A run begins: then, if ``priming``, :meth:`wait_for_priming`."""
        self.count_out: Callable[[], object] = self._ends.__next__
        """A run has ended: then, if ``priming``, :meth:`wake`."""
        self._reads = 0
        """(under the lock) How many ``next()`` calls on each count were reads."""
        self._held = 0
        """(under the lock) Runs counted in that wait for the first profiled run to end."""
        self.nodes = DEFAULT_NODES
        """Nodes per run, from the session's last profile (for ``pool_log``)."""
        self.primed = False
        """A profiled run of this session has completed alone."""
        self.priming = False
        """A first profiled run waits for the runs in flight, or runs (set under the lock)."""
        self._busy_until = 0.0
        """(``time.monotonic()``) Until when a first profiled run is not tried again, after
        one waited in vain for the session's runs in flight."""

    @property
    def in_flight(self) -> int:
        """The session's runs in flight now (held ones included)."""
        with self._lock:
            return self._read()[0]

    @property
    def started(self) -> int:
        """The session's runs started so far."""
        with self._lock:
            return self._read()[1]

    def enter(self) -> None:
        """An unprofiled run begins (after the first profiled run, if one is under way)."""
        self.count_in()
        if self.priming:  # read after counting in: a first profiled run that began to
            self.wait_for_priming()  # wait before then waits for this run

    def leave(self) -> None:
        """A run has ended (returned, raised, or called back)."""
        self.count_out()
        if self.priming:  # read after counting out: the first profiled run may go now
            self.wake()

    def wake(self) -> None:
        """A run ended during priming: the first profiled run may go now."""
        with self._changed:
            self._changed.notify_all()

    def wait_for_priming(self) -> None:
        """A run counted in while a first profiled run primes: held (which the first
        profiled run does not wait for) until that run has ended. Counted out again if
        interrupted (KeyboardInterrupt): that run does not happen."""
        with self._changed:
            self._held += 1
            self._changed.notify_all()  # the first profiled run may go now
            try:
                while self.priming:
                    self._changed.wait()
            except BaseException:  # KeyboardInterrupt: this run does not happen
                next(self._ends)
                raise
            finally:
                self._held -= 1

    def _read(self) -> tuple[int, int]:
        """(holding the lock) The runs in flight and the runs started so far. The end count
        is read first: a run that ends between the two reads counts as in flight."""
        ended = next(self._ends) - self._reads
        started = next(self._starts) - self._reads
        self._reads += 1
        return started - ended, started

    def begin_profiled(self, timeout: float = GATE_TIMEOUT_S) -> Window | None:
        """A profiled run begins; the session's first one once the runs in flight have
        ended, holding new runs back until ``end_profiled``. ``None``: they had not ended
        within ``timeout`` seconds (nothing is held back; the run is not to be profiled)."""
        with self._lock:  # the condition's lock: no Python-level __enter__
            while self.priming:  # another thread's first profiled run: after it
                self._changed.wait()
            first = not self.primed
            if first:
                if time.monotonic() < self._busy_until:
                    return None  # its last try waited in vain: not again yet
                self.priming = True
                try:
                    alone = self._changed.wait_for(self._alone, timeout)
                except BaseException:  # KeyboardInterrupt: the session must not stay held
                    self._unprime()
                    raise
                if not alone:
                    self._busy_until = time.monotonic() + BUSY_BACKOFF_S
                    self._unprime()
                    return None
            in_flight, started = self._read()
            next(self._starts)  # this run
            return Window(0 if first else in_flight, started, first)

    def _alone(self) -> bool:
        """(holding the lock) No run of the session is in flight but held ones."""
        return self._read()[0] == self._held

    def end_profiled(self, window: Window, *, completed: bool = True) -> int:
        """The profiled run begun as ``window`` has ended (``completed``: ORT returned; a run
        that raised may not have started the pool's profiler, so a first one that raised
        leaves the next one first); how many other runs of the session overlapped it (none
        for a first one: it runs alone)."""
        with self._lock:  # the condition's lock: no Python-level __enter__
            next(self._ends)  # this run
            if window.first:
                self.primed = completed
                self._unprime()
                return 0
            return window.in_flight + self._read()[1] - window.started - 1

    def _unprime(self) -> None:
        """(holding the lock) The first profiled run is over: runs held back go."""
        self.priming = False
        self._changed.notify_all()


class _LockedSessionRuns(SessionRuns):
    """:class:`SessionRuns` for a build without the GIL, where ``next()`` on a shared
    ``itertools.count`` is not one atomic step: runs count themselves under the lock (whose
    release also makes ``priming`` read after it current)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        starts, ends, lock = self._starts, self._ends, self._lock

        def count_in() -> object:
            with lock:
                return next(starts)

        def count_out() -> object:
            with lock:
                return next(ends)

        self.count_in, self.count_out = count_in, count_out


_RUNS_CLASS = SessionRuns if getattr(sys, "_is_gil_enabled", lambda: True)() else _LockedSessionRuns


def session_runs(session: Any) -> SessionRuns:
    """The session's ``SessionRuns``, made on its first run (sessions made before
    ``instrument()`` too), and again in a forked child. Sessions on ORT's global thread pool
    (``use_per_session_threads`` off) share one: they share the pool, whose profiler a
    first profiled run of any of them switches on."""
    runs: SessionRuns | None = session.__dict__.get(RUNS_ATTR)
    if runs is None or runs.generation != PROCESS.generation:
        fresh = PROCESS.global_pool_runs() if _on_global_pool(session) else _RUNS_CLASS()
        runs = session.__dict__.setdefault(RUNS_ATTR, fresh)
        if runs.generation != fresh.generation:  # the parent's, in a forked child
            runs = session.__dict__[RUNS_ATTR] = fresh
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

"""perf counting for profiled runs: the counters, probed on the first profiled run, and each
session's ``Pool`` of groups on its intra-op threads, opened on its first profiled run and
closed with it (or at shutdown)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from otel_ort.failures import report_failure
from otel_ort.instrumentation.options import PerfOptions
from otel_ort.perf.counting import PerfCounters, Pool
from otel_ort.profiling.session_runs import pool_threads

_POOL_KEY = "_otel_ort_perf_pool"
_NOT_KNOWN_THREADS = (
    "the session was created before instrument(): its intra-op threads are not known, only "
    "the calling thread is counted"
)
_ASYNC_NOT_COUNTED = "run_async runs on ORT's own thread: its run is not counted"

RunCounters = tuple[PerfCounters, Pool, bool] | str | None
"""What counts a run: perf, the session's pool, whether the calling thread runs the nodes;
or why nothing does (``None``: perf is off)."""


class SessionPerf:
    """The perf counters of one ``instrument()``'s profiled runs (``perf``: ``None`` when off)
    and the pools opened on its sessions."""

    def __init__(self, options: PerfOptions | None) -> None:
        self.perf = (
            PerfCounters(options.events, options.period_ns, options.explicit) if options else None
        )
        self._pools: list[weakref.finalize[Any, Any]] = []
        self._lock = threading.Lock()

    def for_run(self, session: Any, sequential: bool, asynchronous: bool) -> RunCounters:
        """What counts this run of ``session`` (``sequential``: its nodes run on the calling
        thread), or why nothing does."""
        perf = self.perf
        if perf is None:
            return None
        try:  # probes once (again after a shortage of file descriptors or memory)
            if not perf.prepare():
                return perf.unavailable or "perf counters are not ready"
        except Exception as exc:
            report_failure("could not prepare perf counters")
            return f"perf counters could not be prepared: {exc!r}"
        if asynchronous:
            return _ASYNC_NOT_COUNTED
        entry = session.__dict__.get(_POOL_KEY)
        pool = entry[1] if entry is not None and entry[0] == os.getpid() else None
        if pool is None:
            try:
                pool = self._open_pool(session)
            except Exception as exc:
                report_failure("could not open perf counters on a session's threads")
                return f"perf counters could not be opened: {exc!r}"
        return perf, pool, sequential

    def _open_pool(self, session: Any) -> Pool:
        """perf groups on the session's intra-op threads (switched on around its profiled
        runs only: its unprofiled runs pay nothing), closed with the session."""
        assert self.perf is not None
        with self._lock:
            entry = session.__dict__.get(_POOL_KEY)
            if entry is not None and entry[0] == os.getpid():
                opened: Pool = entry[1]  # by another thread's profiled run, meanwhile
                return opened
            threads = pool_threads(session)
            pool = self.perf.pool(threads or ())
            if threads is None:
                pool.problems.append(_NOT_KNOWN_THREADS)
            session.__dict__[_POOL_KEY] = (os.getpid(), pool)
            self._pools = [*(f for f in self._pools if f.alive)]
            self._pools.append(weakref.finalize(session, pool.close))
        return pool

    def close(self) -> None:
        """Close every session's pool, then the counters (at shutdown)."""
        for close in self._pools:
            close()
        if self.perf is not None:
            self.perf.close()

    def after_fork_in_child(self) -> None:
        """The parent's pools are on the parent's threads: closed as a forked child's."""
        self._lock = threading.Lock()
        for close in self._pools:
            detached = close.detach()
            if detached is not None:
                detached[1](forked_child=True)
        self._pools = []
        if self.perf is not None:
            self.perf.after_fork_in_child()

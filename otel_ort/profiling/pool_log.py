"""Bounding ORT's thread-pool profiler log on the threads that run profiled sessions.

After a session's first profiled run, ORT's thread-pool profiler stays enabled for that
session's pool: each later run of the session logs every parallel section (8 bytes each)
into a log of the calling thread's (a thread-local, one for all sessions). ORT clears that
log only when the thread finishes a profiled run, so a thread that serves many unprofiled
runs would grow without end.

``PoolLogs`` counts, per thread, the nodes of the runs of profiled sessions since the
thread's last profiled run (one parallel section per node at most, in the models measured).
When that count passes ``BUDGET`` the thread runs a profiled run of a private one-node
session (``probe_model``) whose node uses its pool: ORT then clears the thread's log. The
profile of that run is aimed at a directory that does not exist, so ORT writes no file.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from otel_ort._util.forking import renew_locks_in_child
from otel_ort.failures import report_failure
from otel_ort.profiling import probe_model
from otel_ort.profiling.run_options import RunProfilingSwitch

_logger = logging.getLogger("otel_ort")

BUDGET = 8_192
"""Nodes run on a thread between two clearings: its log stays within about 64 KiB (a
clearing costs that thread about 0.04 ms)."""
_INPUT_LENGTH = 1 << 16
"""Long enough for ORT to split the node's work over its pool (a parallel section)."""


class PoolLogs:
    """When each thread's thread-pool profiler log is cleared."""

    def __init__(self, switch: RunProfilingSwitch, void_prefix: str) -> None:
        self._switch = switch
        self._prefix = void_prefix
        """In a directory that does not exist (``ProfileStore.void_prefix``)."""
        self._local = threading.local()
        self._session: probe_model.PrivateSession | None = None
        self._feeds = {probe_model.INPUT: np.ones(_INPUT_LENGTH, np.float32)}
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")
        self.clearings = 0

    def ran(self, nodes: int) -> None:
        """This thread ran an unprofiled run of ``nodes`` nodes on a session with profiling
        on in its pool; clears the thread's log when it is due (never raises)."""
        local = self._local
        pending = getattr(local, "pending", 0) + nodes
        if pending < BUDGET:
            local.pending = pending
            return
        local.pending = 0
        try:
            self._clear()
        except Exception:
            report_failure("could not clear a thread's thread-pool profiler log")

    def cleared(self) -> None:
        """This thread has just run a profiled run: ORT cleared its log."""
        self._local.pending = 0

    def _clear(self) -> None:
        import onnxruntime

        with self._lock:
            if self._session is None:
                self._session = probe_model.PrivateSession(onnxruntime, threads=2)
        options = onnxruntime.RunOptions()
        self._switch.enable(options, self._prefix)
        try:
            self._session.run(self._feeds, options)
        except probe_model.PoolBusy:  # ORT's global pool: the next clearing tries again
            return
        self.clearings += 1

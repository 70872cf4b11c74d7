"""A ``RunOptions`` switched to profile ahead of the run that will use it.

Switching run-level profiling on (a fresh ``RunOptions``, a file prefix, the checked write)
is Python work that would otherwise run on the request thread right before ORT's run, on
caches that ORT's last run has just evicted. For calls without a ``RunOptions`` of their own
(the usual ``run(None, feeds)``) the worker makes the next one after each conversion, and
the next profiled run takes it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from otel_ort.failures import report_failure
from otel_ort.profiling.run_options import RunProfilingSwitch
from otel_ort.profiling.store import ProfileStore, RunFiles


@dataclass(frozen=True, slots=True)
class Ready:
    """A ``RunOptions`` that profiles into its ``files``' prefix."""

    options: Any
    files: RunFiles


class ReadyOptions:
    """At most one ``Ready``, taken by a request thread, made again by the worker."""

    def __init__(self) -> None:
        self._ready: deque[Ready] = deque(maxlen=1)

    def take(self) -> Ready | None:
        """The ready ``RunOptions`` and its files, if one is there (any thread)."""
        try:
            return self._ready.popleft()
        except IndexError:
            return None

    def make(self, store: ProfileStore, switch: RunProfilingSwitch) -> None:
        """Worker: make the next one, unless one is there (a failure is reported: the next
        profiled run then switches its own on)."""
        if self._ready:
            return
        import onnxruntime

        try:
            options, files = onnxruntime.RunOptions(), store.new_run()
            switch.enable(options, files.prefix)
        except Exception:
            report_failure("could not switch a RunOptions to profile ahead")
            return
        self._ready.append(Ready(options, files))

    def clear(self) -> None:
        """In a forked child: the ready one's file prefix names the parent."""
        self._ready.clear()

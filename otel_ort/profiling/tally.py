"""The profiling engine's counts: selected runs by outcome (``profiled``, ``run_failed``, a
skip reason, ``profile_error``), profile spans dropped and files deleted; each added to this
process's totals (``Profiler.counts``) and to its metric (``Instruments``)."""

from __future__ import annotations

import threading
from collections import Counter

from opentelemetry.trace import Span

from otel_ort import semconv
from otel_ort.instrumentation.metrics import Instruments
from otel_ort.profiling.conversion import MAX_DETAIL
from otel_ort.profiling.session_checks import Skipped


class Tally:
    """Counts what became of selected runs, into ``onnxruntime.profile.runs``,
    ``onnxruntime.profile.spans.dropped`` and ``onnxruntime.profile.files.deleted``."""

    def __init__(self, instruments: Instruments) -> None:
        self._runs = instruments.profile_runs
        self._dropped = instruments.profile_spans_dropped
        self._deleted = instruments.profile_files_deleted
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def skipped(self, span: Span, skipped: Skipped) -> None:
        """A selected run that was not profiled: said on its span, counted."""
        reason, detail = skipped.reason, skipped.detail
        if span.is_recording():
            span.set_attributes(
                {
                    semconv.PROFILE_SKIP_REASON: reason,
                    semconv.PROFILE_SKIP_DETAIL: detail[:MAX_DETAIL],
                }
            )
        self.run(reason)

    def converted(self, what: str, number: int) -> None:
        """The converter's counts: outcomes, and what it dropped or deleted."""
        if what == "spans_dropped":
            self._add(what, number)
            self._dropped.add(number)
        elif what == "files_deleted":
            self._add(what, number)
            self._deleted.add(number)
        else:
            self.run(what)

    def run(self, outcome: str) -> None:
        """One selected run's ``outcome``."""
        self._add(outcome)
        self._runs.add(1, {semconv.PROFILE_OUTCOME: outcome})

    def _add(self, what: str, number: int = 1) -> None:
        with self._lock:
            self._counts[what] += number

    def totals(self) -> dict[str, int]:
        """This process's totals: selected runs by outcome, ``spans_dropped``,
        ``files_deleted``."""
        with self._lock:
            return dict(self._counts)

    def after_fork_in_child(self) -> None:
        """A forked child counts afresh: its totals are its own."""
        self._lock = threading.Lock()
        self._counts = Counter()

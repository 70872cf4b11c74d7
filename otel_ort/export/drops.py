"""``DropCounter``: the spans otel-ort's export pipeline dropped, counted and said.

Every span dropped, by a full queue, a shutdown or a failed export, is counted in the
``otel_ort.spans.dropped`` metric (by stream and reason) and logged: once, then at most once
a minute, and a last time at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from opentelemetry import metrics
from opentelemetry.metrics import Counter as Counter_
from opentelemetry.metrics import MeterProvider as ApiMeterProvider

from otel_ort import semconv
from otel_ort._util.forking import after_fork_in_child
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

_LOG_INTERVAL_S = 60.0


class DropCounter:
    """Dropped spans by stream and reason: a metric, and a log line at most once a minute
    (and a last one at shutdown) with what was dropped since the previous line."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._unlogged: Counter[tuple[str, str]] = Counter()
        self._why = ""
        self._last_logged = -_LOG_INTERVAL_S
        self._lock = threading.Lock()
        self._metric: Counter_ | None = None
        after_fork_in_child(self, DropCounter._restart)

    def _restart(self) -> None:
        """In a forked child: count its own drops, under a lock of its own."""
        self._counts, self._unlogged, self._lock = Counter(), Counter(), threading.Lock()

    def measure_with(self, meter_provider: ApiMeterProvider) -> None:
        """Record drops from now on in the ``otel_ort.spans.dropped`` counter of this provider."""
        meter = metrics.get_meter("otel_ort", __version__, meter_provider)
        self._metric = meter.create_counter(
            semconv.METRIC_SPANS_DROPPED, "{span}", "Spans otel-ort's export pipeline dropped."
        )

    def add(self, stream: str, reason: str, count: int, why: str) -> None:
        """``count`` spans of ``stream`` (requests, profiles) were dropped for ``reason``."""
        if count <= 0:
            return
        if self._metric is not None:
            attributes = {semconv.EXPORT_STREAM: stream, semconv.ERROR_TYPE: reason}
            self._metric.add(count, attributes)
        with self._lock:
            self._counts[stream, reason] += count
            self._unlogged[stream, reason] += count
            self._why = why
        self.log(force=False)

    def log(self, force: bool = True) -> None:
        """Log what was dropped since the last line: now if ``force``, else once a minute."""
        now = time.monotonic()
        with self._lock:
            if not self._unlogged or (not force and now - self._last_logged < _LOG_INTERVAL_S):
                return
            unlogged, self._unlogged, self._last_logged = self._unlogged, Counter(), now
            totals = sum(self._counts.values())
            why = self._why
        parts = ", ".join(f"{n} of {s} ({r})" for (s, r), n in sorted(unlogged.items()))
        _logger.warning(
            "otel-ort: spans dropped: %s; last because %s (%d in all, counted in the %s metric)",
            parts,
            why,
            totals,
            semconv.METRIC_SPANS_DROPPED,
        )

    def counts(self) -> dict[str, int]:
        """Dropped spans so far, keyed ``"<stream>.<reason>"``."""
        with self._lock:
            return {f"{stream}.{reason}": n for (stream, reason), n in self._counts.items()}

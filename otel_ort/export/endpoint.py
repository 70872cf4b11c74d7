"""Whether the collector answers, and the exporters that count what reaches it.

An export that fails (collector unreachable) marks the endpoint down: the batches of the next
few seconds are dropped at once, counted, instead of retrying each for the whole export
timeout, and at shutdown an endpoint still down is not tried again. The profile worker keeps
writing profile files, and the process exits promptly.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ort._util.forking import after_fork_in_child
from otel_ort.cli.tables import plural
from otel_ort.export.drops import DropCounter
from otel_ort.export.otlp_transport import Encoded, EncodedExport
from otel_ort.export.sdk_internals import metric_preferences

UNREACHABLE_PAUSE_S = 5.0
"""After a failed export, batches are dropped (counted) without trying for this long."""


class Endpoint:
    """Whether the collector answers: down after a failed export, up again after a success.

    While down, exports in the ``pause_s`` after each failure are not tried; after
    :meth:`give_up` (shutdown of a pipeline whose endpoint is down) none are.
    """

    def __init__(self, target: str, pause_s: float = UNREACHABLE_PAUSE_S) -> None:
        self.target = target
        self._pause_s = pause_s
        self._down = False
        self._retry_at = 0.0

    def should_try(self) -> bool:
        return not self._down or time.monotonic() >= self._retry_at

    def answered(self, ok: bool) -> None:
        self._down = not ok
        if self._retry_at != math.inf:  # given up: an export in flight does not undo that
            self._retry_at = time.monotonic() + self._pause_s

    @property
    def down(self) -> bool:
        return self._down

    def give_up(self, target_down: bool = False) -> None:
        """Shutting down: if the endpoint is down (or, ``target_down``, another exporter
        found its target down), try nothing more (it would only wait)."""
        if self._down or target_down:
            self._down = True
            self._retry_at = math.inf


class CountingSpanExporter(SpanExporter):
    """Forwards to an exporter, counting spans sent and lost; skips an endpoint that is down."""

    def __init__(
        self,
        inner: SpanExporter,
        endpoint: Endpoint,
        drops: DropCounter | None = None,
        stream: str = "requests",
    ) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0
        self._endpoint = endpoint
        self._drops = drops
        self._stream = stream
        self._in_flight = 0
        self._abandoned = 0  # how many times exports in flight were given up
        self._lock = threading.Lock()
        after_fork_in_child(self, CountingSpanExporter._restart)

    def _restart(self) -> None:
        """In a forked child: count its own exports (the parent's in flight are not its
        spans to lose), under a lock of its own."""
        self.sent = self.failed = self._in_flight = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._counted(len(spans), partial(self.inner.export, spans))

    def export_encoded(self, batch: Encoded) -> SpanExportResult:
        """An encoded request (profile spans: :mod:`otel_ort.export.profile_export`), counted
        alike."""
        return self._counted(
            batch.spans, partial(cast(EncodedExport, self.inner).export_encoded, batch)
        )

    def _counted(self, spans: int, send: Callable[[], SpanExportResult]) -> SpanExportResult:
        target = self._endpoint.target
        if not self._endpoint.should_try():
            return self._lost(spans, f"{target} failed moments ago (not retried yet)")
        with self._lock:
            self._in_flight += spans
            abandoned = self._abandoned
        try:
            result = send()
        except Exception as exc:  # an exporter bug must not escape the batch thread uncounted
            result, why = SpanExportResult.FAILURE, f"exporting to {target} raised {exc!r}"
        else:
            why = f"the export to {target} failed (the exporter's log says why)"
        with self._lock:
            self._in_flight -= spans
            if abandoned != self._abandoned:  # counted lost by abandon_in_flight
                return result
        self._endpoint.answered(result is SpanExportResult.SUCCESS)
        if result is not SpanExportResult.SUCCESS:
            return self._lost(spans, why)
        self.sent += spans
        return result

    def _lost(self, spans: int, why: str) -> SpanExportResult:
        self.failed += spans
        if self._drops is not None:
            self._drops.add(self._stream, "export_failed", spans, why)
        return SpanExportResult.FAILURE

    def abandon_in_flight(self) -> int:
        """Shutdown gave up waiting: the spans of exports still in flight, which count as lost
        now (they are not counted again when the export ends)."""
        with self._lock:
            self._abandoned += 1
            in_flight = self._in_flight
        if in_flight:  # a collector that has not answered by then counts as down
            self._endpoint.answered(False)
        return in_flight

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def delivery_report(
    exporter: CountingSpanExporter, endpoint: str, traces: int, spans: int
) -> tuple[str, str]:
    """After the provider's shutdown: a line on what reached ``endpoint`` of the ``spans``
    handed to the provider, and what was lost (``""`` if nothing), for the CLI commands that
    replay profiles over OTLP. Spans neither sent nor failed were dropped, or still queued or
    in an export when the shutdown's timeout ran out."""
    sent, failed = exporter.sent, exporter.failed
    summary = (
        f"OTLP: {sent} of {plural(spans, 'span')} ({plural(traces, 'trace')}) sent to "
        f"{endpoint}; {failed} failed to send, {max(0, spans - sent - failed)} dropped, or "
        "still unsent when the shutdown timed out"
    )
    if sent >= spans:
        return summary, ""
    return summary, (
        f"{spans - sent} of {spans} spans did not reach {endpoint}: check the endpoint and "
        "--protocol, and that it answers (the exporter's messages above say why)"
    )


class EndpointMetricExporter(MetricExporter):
    """Forwards to a metric exporter, skipping an endpoint that is down (metrics are resent
    cumulatively at the next interval, so a skipped export loses no count)."""

    def __init__(self, inner: MetricExporter, endpoint: Endpoint) -> None:
        preferences = metric_preferences(inner)
        super().__init__(preferences.temporality, preferences.aggregation)
        self._inner = inner
        self._endpoint = endpoint

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if not self._endpoint.should_try():
            return MetricExportResult.FAILURE
        result = self._inner.export(metrics_data, timeout_millis, **kwargs)
        self._endpoint.answered(result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis, **kwargs)

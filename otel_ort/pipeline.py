"""``configure()``: OTLP export for processes without their own OpenTelemetry SDK set-up.

Request spans (every ``onnxruntime.run`` and the caller's own spans) and profile spans (the
node and kernel spans of a profiled run, delivered in bursts of thousands) go through two
separate batch processors, each with its own queue and exporter, so a burst can never evict a
request span. Profile spans are delivered with back-pressure (:mod:`otel_ort.delivery`) and
are not dropped by their queue; request spans that find their queue full are. Every span that
is dropped, by a full queue or by a failed export, is counted in the ``otel_ort.spans.dropped``
metric and logged (once, then at most once a minute).

An export that fails (collector unreachable) makes the exporter drop the batches of the next
few seconds at once, counted, instead of retrying each for the whole export timeout: the
profile worker keeps writing profile files, and the process exits promptly.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider as ApiMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_ort import semconv
from otel_ort.spans import PROFILE_SCOPE_NAME
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")

PROFILE_QUEUE_SIZE = 8192
"""Profile spans held for export (about 2-3 KiB each): a few profiled runs' worth."""

UNREACHABLE_PAUSE_S = 5.0
"""After a failed export, batches are dropped (counted) without trying for this long."""

_LOG_INTERVAL_S = 60.0


class DropCounter:
    """Dropped spans by stream and reason: a metric, and a log line at most once a minute."""

    def __init__(self, meter_provider: ApiMeterProvider | None = None) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._unlogged: Counter[tuple[str, str]] = Counter()
        self._last_logged = -_LOG_INTERVAL_S
        self._lock = threading.Lock()
        meter = metrics.get_meter("otel_ort", __version__, meter_provider)
        self._metric = meter.create_counter(
            semconv.METRIC_SPANS_DROPPED, "{span}", "Spans otel-ort's export pipeline dropped."
        )

    def add(self, stream: str, reason: str, count: int, why: str) -> None:
        """``count`` spans of ``stream`` (requests, profiles) were dropped for ``reason``."""
        if count <= 0:
            return
        self._metric.add(count, {semconv.EXPORT_STREAM: stream, semconv.ERROR_TYPE: reason})
        now = time.monotonic()
        with self._lock:
            self._counts[stream, reason] += count
            self._unlogged[stream, reason] += count
            if now - self._last_logged < _LOG_INTERVAL_S:
                return
            unlogged, self._unlogged, self._last_logged = self._unlogged, Counter(), now
        parts = ", ".join(f"{n} of {s} ({r})" for (s, r), n in sorted(unlogged.items()))
        _logger.warning(
            "otel-ort: spans dropped: %s; %s (counted in the %s metric)",
            parts,
            why,
            semconv.METRIC_SPANS_DROPPED,
        )

    def counts(self) -> dict[str, int]:
        """Dropped spans so far, keyed ``"<stream>.<reason>"``."""
        with self._lock:
            return {f"{stream}.{reason}": n for (stream, reason), n in self._counts.items()}


class CountingSpanExporter(SpanExporter):
    """Forwards to an exporter, counting spans sent and lost; pauses after a failed export."""

    def __init__(
        self,
        inner: SpanExporter,
        target: str,
        drops: DropCounter | None = None,
        stream: str = "requests",
        pause_s: float = UNREACHABLE_PAUSE_S,
    ) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0
        self._target = target
        self._drops = drops
        self._stream = stream
        self._pause_s = pause_s
        self._paused_until = 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if time.monotonic() < self._paused_until:
            return self._lost(spans, f"{self._target} failed moments ago; not retried yet")
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self._paused_until = time.monotonic() + self._pause_s
            return self._lost(spans, f"export to {self._target} failed (the exporter says why)")
        self.sent += len(spans)
        return result

    def _lost(self, spans: Sequence[ReadableSpan], why: str) -> SpanExportResult:
        self.failed += len(spans)
        if self._drops is not None:
            self._drops.add(self._stream, "export_failed", len(spans), why)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class RequestSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor for the tracer's spans, counting those a full queue drops.

    Profile spans never reach it (:class:`otel_ort.delivery.SpanDelivery` skips it), so a
    profile burst cannot fill its queue.
    """

    takes_profile_spans = False

    def __init__(self, exporter: SpanExporter, drops: DropCounter) -> None:
        super().__init__(exporter)
        self._drops = drops

    def on_end(self, span: ReadableSpan) -> None:
        batch = self._batch_processor
        if span.context is not None and span.context.trace_flags.sampled:
            if batch._shutdown:
                self._drops.add("requests", "already_shutdown", 1, "the pipeline was shut down")
            elif len(batch._queue) >= batch._max_queue_size:
                why = "the export queue was full (raise OTEL_BSP_MAX_QUEUE_SIZE)"
                self._drops.add("requests", "queue_full", 1, why)
        super().on_end(span)


class ProfileSpanProcessor(BatchSpanProcessor):
    """A batch processor of its own for profile spans, which the tracer's spans bypass."""

    def __init__(self, exporter: SpanExporter, max_queue_size: int) -> None:
        super().__init__(exporter, max_queue_size=max_queue_size)

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == PROFILE_SCOPE_NAME:
            super().on_end(span)


@dataclass(frozen=True)
class Telemetry:
    """What :func:`configure` set up."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    drops: DropCounter
    endpoint: str
    protocol: Protocol

    def dropped(self) -> dict[str, int]:
        """Spans dropped so far, ``"<stream>.<reason>"`` → count (also the metric)."""
        return self.drops.counts()

    def shutdown(self) -> None:
        """Flush and stop both providers (also done at interpreter exit)."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def configure(
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | str | None = None,
    insecure: bool | None = None,
    *,
    profile_queue_size: int = PROFILE_QUEUE_SIZE,
    metrics_export: bool | None = None,
    set_global: bool = True,
) -> Telemetry:
    """Export traces and metrics over OTLP, and make them the global providers.

    Every argument left ``None`` falls back to the standard variable (``OTEL_SERVICE_NAME``,
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``..._PROTOCOL``, ``..._HEADERS``,
    ``..._INSECURE``; ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``,
    ``OTEL_METRIC_EXPORT_INTERVAL``), then to OTLP/gRPC on ``localhost:4317``. For HTTP,
    ``endpoint`` is the base URL (``http://host:4318``): ``/v1/traces`` and ``/v1/metrics``
    are added. ``metrics_export=False`` (or ``OTEL_METRICS_EXPORTER=none``) keeps metrics in
    the process (for backends that take traces only). Under ``opentelemetry-instrument`` this
    is not needed (and refused).
    """
    chosen = _protocol(protocol)
    if profile_queue_size < 1:
        raise ValueError(f"profile_queue_size must be at least 1, got {profile_queue_size}")
    header_dict = _parse_headers(headers) if isinstance(headers, str) else _dict(headers)
    if set_global and isinstance(trace.get_tracer_provider(), TracerProvider):
        raise RuntimeError(
            "otel_ort.configure(): an OpenTelemetry SDK tracer provider is already set (by "
            "opentelemetry-instrument or your code); remove the configure() call and let "
            "that set-up export, or call configure(set_global=False) for a separate pipeline"
        )
    attributes = {SERVICE_NAME: service_name} if service_name else {}
    resource = Resource.create(attributes)
    if metrics_export is None:
        metrics_export = os.environ.get("OTEL_METRICS_EXPORTER", "").strip() != "none"
    readers = (
        [PeriodicExportingMetricReader(_metric_exporter(chosen, endpoint, header_dict, insecure))]
        if metrics_export
        else []
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    drops = DropCounter(meter_provider)
    target = _target(chosen, endpoint)
    tracer_provider = TracerProvider(resource=resource)

    def exporter(stream: str) -> CountingSpanExporter:
        inner = otlp_span_exporter(chosen, endpoint, header_dict, insecure)
        return CountingSpanExporter(inner, target, drops, stream)

    tracer_provider.add_span_processor(RequestSpanProcessor(exporter("requests"), drops))
    tracer_provider.add_span_processor(
        ProfileSpanProcessor(exporter("profiles"), profile_queue_size)
    )
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, drops, target, chosen)


def otlp_span_exporter(
    protocol: str,
    endpoint: str | None = None,
    headers: dict[str, str] | None = None,
    insecure: bool | None = None,
) -> SpanExporter:
    """The standard OTLP span exporter for ``protocol``; ``None`` arguments come from the env."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, headers=headers, insecure=insecure)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(endpoint=_http_url(endpoint, "traces"), headers=headers)


def _metric_exporter(
    protocol: str,
    endpoint: str | None,
    headers: dict[str, str] | None,
    insecure: bool | None,
) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, headers=headers, insecure=insecure)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(endpoint=_http_url(endpoint, "metrics"), headers=headers)


def _http_url(endpoint: str | None, signal: str) -> str | None:
    """A base URL given by the caller gets ``/v1/<signal>``; ``None`` leaves it to the env."""
    if endpoint is None:
        return None
    base = endpoint.rstrip("/")
    return base if base.endswith(f"/v1/{signal}") else f"{base}/v1/{signal}"


def _protocol(given: str | None) -> Protocol:
    value = (
        given
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    for protocol in PROTOCOLS:
        if value.strip() == protocol:
            return protocol
    raise ValueError(
        f"OTLP protocol {value!r} is not supported: use one of {', '.join(PROTOCOLS)} "
        "(protocol= or OTEL_EXPORTER_OTLP_PROTOCOL)"
    )


def _target(protocol: Protocol, endpoint: str | None) -> str:
    """Where spans go, for messages: the endpoint as given or as the environment sets it."""
    given = (
        endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if given:
        return given
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"


def _dict(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if headers is None else dict(headers)


def _parse_headers(text: str) -> dict[str, str]:
    """``key=value,key2=value2`` (the ``OTEL_EXPORTER_OTLP_HEADERS`` form) as a dict."""
    headers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"OTLP header {item!r} is not key=value: write headers as k=v,k2=v2")
        headers[key.strip()] = value.strip()
    return headers

"""Every read of the OpenTelemetry SDK's private parts, each in one small function.

otel-ort needs a few things the SDK keeps private: a tracer provider's span processors (to
hand profile spans to each) and span limits; a batch span processor's queue (back-pressure,
drop counts); a metric exporter's preferences (to wrap it); the OTLP span exporters'
transport (to send requests otel-ort encoded). ``tests/test_sdk_internals.py`` holds a
contract test for each function here: an SDK that renames or drops one of these parts fails
it. Functions whose callers cope without the part (a provider or processor that is not the
SDK's) return ``None`` or a default; the others raise ``AttributeError``, as the read would.

The gRPC exporter's methods that :mod:`otel_ort.export.otlp_transport` overrides
(``_initialize_channel_and_stub``, ``_translate_data``, ``_count_data``) are not reads: a
subclass overrides them by name there, and ``tests/test_profile_export.py`` checks that the
SDK still has them.
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

# -- a tracer provider ------------------------------------------------------------------------


def active_span_processor(tracer_provider: object) -> SpanProcessor | None:
    """The processor an SDK provider ends spans on, which calls every processor added
    (``_active_span_processor``); ``None`` for a provider that is not the SDK's."""
    if not isinstance(tracer_provider, TracerProvider):
        return None
    active: SpanProcessor | None = getattr(tracer_provider, "_active_span_processor", None)
    return active


def span_processors(active: SpanProcessor) -> tuple[SpanProcessor, ...]:
    """The processors behind a provider's active multi-processor (``_span_processors``; the
    tuple is replaced when one is added: read it each time), else ``active`` alone."""
    return tuple(getattr(active, "_span_processors", (active,)))


def span_limits(tracer_provider: TracerProvider) -> SpanLimits:
    """The limits the provider's spans are cut to (``_span_limits``)."""
    limits: SpanLimits = tracer_provider._span_limits
    return limits


# -- a batch span processor's queue -----------------------------------------------------------


def batch_engine(processor: object) -> Any:
    """The object inside an SDK ``BatchSpanProcessor`` that holds its queue and export
    thread (``_batch_processor``); ``None`` for other processors."""
    return getattr(processor, "_batch_processor", None)


def batch_queue(engine: object) -> Sized | None:
    """The engine's queue of spans (``_queue``; its ``len`` is what it holds), or ``None``."""
    queue: Sized | None = getattr(engine, "_queue", None)
    return queue


def queue_capacity(engine: object) -> int | None:
    """How many spans the engine's queue holds at most (``_max_queue_size``), or ``None``."""
    capacity: int | None = getattr(engine, "_max_queue_size", None)
    return capacity


def queue_full(engine: Any) -> bool:
    """Whether the engine's queue is full (``_queue``, ``_max_queue_size``)."""
    full: bool = len(engine._queue) >= engine._max_queue_size
    return full


def queued(engine: Any) -> int:
    """How many spans the engine's queue holds (``_queue``)."""
    return len(engine._queue)


def shut_down_engine(engine: Any, timeout_millis: int) -> None:
    """Shut the engine down: export what is queued within ``timeout_millis``, then take no
    more (its ``shutdown(timeout_millis)``; the processor's own takes no timeout)."""
    engine.shutdown(timeout_millis)


def engine_shut_down(engine: object) -> bool:
    """Whether the engine was shut down (``_shutdown``; ``False`` where there is none)."""
    return bool(getattr(engine, "_shutdown", False))


# -- a metric exporter ------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricPreferences:
    """What a metric exporter asks its reader for, by instrument class (``None``: the
    reader's defaults)."""

    temporality: dict[type, AggregationTemporality] | None
    aggregation: dict[type, Any] | None


def metric_preferences(exporter: MetricExporter) -> MetricPreferences:
    """The exporter's preferred temporality and aggregation (``_preferred_temporality``,
    ``_preferred_aggregation``), for an exporter that wraps it."""
    return MetricPreferences(exporter._preferred_temporality, exporter._preferred_aggregation)


# -- the OTLP span exporters' transport -------------------------------------------------------


def grpc_channel(exporter: Any) -> Any:
    """The gRPC exporter's channel (``_channel``), made by ``_initialize_channel_and_stub``."""
    return exporter._channel


def set_grpc_stub(exporter: Any, stub: object) -> None:
    """Make ``stub`` the gRPC exporter's ``TraceService`` stub (``_client``): its ``Export``
    sends each request."""
    exporter._client = stub


def grpc_export(exporter: Any, data: object) -> SpanExportResult:
    """Send ``data`` with the gRPC exporter's retries, timeout, headers and compression
    (``_export``, which calls ``_translate_data(data)`` and ``_count_data(data)``)."""
    result: SpanExportResult = exporter._export(data)
    return result


def http_post(exporter: Any, body: bytes) -> bool:
    """POST an encoded request with the HTTP exporter's compression, headers, retries and
    timeout (``_client.export``); whether it succeeded (the result's ``success``)."""
    return bool(exporter._client.export(body).success)


def http_shut_down(exporter: Any) -> bool:
    """Whether the HTTP exporter was shut down (``_shutdown``)."""
    return bool(exporter._shutdown)

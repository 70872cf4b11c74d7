"""Contract tests for the SDK's private parts otel-ort reads (otel_ort/export/sdk_internals.py):
each fails if the installed SDK renames, drops or changes the part its function reads."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import Counter, Histogram
from opentelemetry.sdk.metrics.export import AggregationTemporality
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

from otel_ort.export import sdk_internals as sdk
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import encode_readable
from tests.helpers.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parent.parent


def finished_spans(count: int, provider: TracerProvider | None = None) -> list[ReadableSpan]:
    """``count`` ended spans of a real SDK provider, caught by an in-memory exporter."""
    provider = provider or TracerProvider()
    caught = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(caught))
    tracer = provider.get_tracer("contract")
    for index in range(count):
        tracer.start_span(f"span-{index}").end()
    return list(caught.get_finished_spans())


# -- a tracer provider ------------------------------------------------------------------------


def test_the_active_span_processor_calls_the_processors_added() -> None:
    provider = TracerProvider()
    first = SimpleSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(first)
    active = sdk.active_span_processor(provider)
    assert active is not None, "the SDK provider lost _active_span_processor"
    assert sdk.span_processors(active) == (first,), "its multi-processor lost _span_processors"
    second = SimpleSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(second)
    assert sdk.span_processors(active) == (first, second), "read afresh, it has the new one"


def test_a_provider_that_is_not_the_sdks_has_no_active_processor() -> None:
    assert sdk.active_span_processor(NoOpTracerProvider()) is None
    lone = SimpleSpanProcessor(InMemorySpanExporter())
    assert sdk.span_processors(lone) == (lone,)


def test_span_limits_are_the_ones_the_providers_spans_get() -> None:
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=3))
    assert sdk.span_limits(provider).max_span_attributes == 3, "_span_limits is not the limits"
    caught = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(caught))
    provider.get_tracer("contract").start_span("s", attributes={str(i): i for i in range(5)}).end()
    (span,) = caught.get_finished_spans()
    assert span.attributes is not None and len(span.attributes) == 3


# -- a batch span processor's queue -----------------------------------------------------------


class HeldExporter(SpanExporter):
    """Holds each export until ``release`` is set, so spans stay in the processor's queue."""

    def __init__(self) -> None:
        self.exporting = threading.Event()
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exporting.set()
        self.release.wait(30)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


@pytest.fixture
def held() -> Iterator[tuple[BatchSpanProcessor, HeldExporter]]:
    """A real batch processor (queue of 4, batches of 4) whose export thread is held inside
    an export of 4 spans: the spans ended next stay in its queue."""
    exporter = HeldExporter()
    processor = BatchSpanProcessor(
        exporter, max_queue_size=4, max_export_batch_size=4, schedule_delay_millis=60_000
    )
    for span in finished_spans(4):
        processor.on_end(span)
    assert exporter.exporting.wait(10), "the export thread never took the first batch"
    try:
        yield processor, exporter
    finally:
        exporter.release.set()
        processor.shutdown()  # type: ignore[no-untyped-call]


def test_the_queue_holds_the_spans_ended_while_the_export_thread_is_busy(
    held: tuple[BatchSpanProcessor, HeldExporter],
) -> None:
    processor, _ = held
    engine = sdk.batch_engine(processor)
    assert engine is not None, "BatchSpanProcessor lost _batch_processor"
    queue = sdk.batch_queue(engine)
    assert queue is not None, "its batch engine lost _queue"
    assert sdk.queue_capacity(engine) == 4, "its batch engine lost _max_queue_size"
    assert sdk.queued(engine) == len(queue) == 0
    for count, span in enumerate(finished_spans(4), start=1):
        assert not sdk.queue_full(engine)
        processor.on_end(span)
        assert sdk.queued(engine) == len(queue) == count
    assert sdk.queue_full(engine)


def test_shutting_the_engine_down_stops_it_within_its_timeout(
    held: tuple[BatchSpanProcessor, HeldExporter],
) -> None:
    processor, exporter = held
    engine = sdk.batch_engine(processor)
    for span in finished_spans(2):
        processor.on_end(span)
    assert not sdk.engine_shut_down(engine)
    sdk.shut_down_engine(engine, 100)  # the export thread is still held: the timeout ends it
    assert not exporter.release.is_set()
    assert sdk.engine_shut_down(engine), "its batch engine lost _shutdown"
    assert sdk.queued(engine) == 2, "what the timeout left is still queued, to be counted"
    processor.on_end(finished_spans(1)[0])
    assert sdk.queued(engine) == 2, "a shut-down engine takes no more spans"


def test_a_processor_without_a_batch_engine_has_no_queue() -> None:
    engine = sdk.batch_engine(SimpleSpanProcessor(InMemorySpanExporter()))
    assert engine is None
    assert sdk.batch_queue(engine) is None and sdk.queue_capacity(engine) is None
    assert not sdk.engine_shut_down(engine)


# -- a metric exporter ------------------------------------------------------------------------


def test_a_metric_exporters_preferences_are_the_ones_it_was_given() -> None:
    exporter = OTLPMetricExporter(
        endpoint="http://127.0.0.1:1/v1/metrics",
        preferred_temporality={Counter: AggregationTemporality.DELTA},
    )
    try:
        preferences = sdk.metric_preferences(exporter)
    finally:
        exporter.shutdown()
    assert preferences.temporality is not None, "MetricExporter lost _preferred_temporality"
    assert preferences.temporality[Counter] is AggregationTemporality.DELTA
    assert preferences.temporality[Histogram] is AggregationTemporality.CUMULATIVE
    assert preferences.aggregation is not None, "MetricExporter lost _preferred_aggregation"


# -- the OTLP span exporters' transport -------------------------------------------------------


class RecordingStub:
    """A ``TraceService`` stub that keeps the requests the exporter sends through it."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def Export(self, request: Any, **kwargs: Any) -> None:  # gRPC's name
        self.requests.append(request)


def test_the_grpc_exporter_sends_through_the_stub_set_on_its_channel() -> None:
    exporter: Any = GrpcSpanExporter(endpoint="http://127.0.0.1:1", insecure=True)
    try:
        assert isinstance(sdk.grpc_channel(exporter), grpc.Channel), "it lost _channel"
        stub = RecordingStub()
        sdk.set_grpc_stub(exporter, stub)
        spans = finished_spans(2)
        assert sdk.grpc_export(exporter, spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert len(stub.requests) == 1, "_export did not send through _client.Export"
    request = stub.requests[0]
    assert isinstance(request, ExportTraceServiceRequest)
    names = {s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert names == {"span-0", "span-1"}


def test_the_http_exporter_posts_a_request_and_says_whether_it_arrived() -> None:
    spans = finished_spans(3)
    body = encode_readable(spans, ProtobufSpans()).request
    with OtlpReceiver() as receiver:
        exporter: Any = HttpSpanExporter(endpoint=f"{receiver.http_endpoint}/v1/traces")
        assert not sdk.http_shut_down(exporter), "the HTTP exporter lost _shutdown"
        assert sdk.http_post(exporter, body), "_client.export's result is not a success"
        exporter.shutdown()
        assert sdk.http_shut_down(exporter)
        received = receiver.spans()
    assert sorted(span.name for _, span in received) == ["span-0", "span-1", "span-2"]


# -- where the private reads are --------------------------------------------------------------


def test_no_export_module_imports_the_instrumentor() -> None:
    """export/ comes after the instrumentation on a run's path: the package registers the
    wait for profiled runs with configure()'s shutdown (``wait_before_shutdown``)."""
    importing = []
    for path in sorted((ROOT / "otel_ort" / "export").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name.startswith("otel_ort.instrumentation") for name in names):
                importing.append(path.name)
    assert importing == []

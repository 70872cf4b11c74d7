"""Encoded profile spans on their way out: the SDK transport otel-ort borrows (a contract test
for each private part it reads), the profile processor's back-pressure and shutdown, and a
10,000-node run's trace as a real OTLP receiver gets it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.exporter import OTLPExporterMixin
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_ort import semconv
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.drops import DropCounter
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import Encoded, encoded_span_exporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.profiles import read_profile
from otel_ort.profiles.span_draft import SpanDraft
from otel_ort.profiles.spans import SpanBuilder
from tests.conftest import EncodedExporter
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import session_level_profile


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_level_profile(tmp_path_factory.mktemp("profiles"), depth=20, runs=1)


def drafts(path: Path, copies: int = 1) -> list[SpanDraft]:
    provider = TracerProvider()
    profile = read_profile(path)
    builder = SpanBuilder(provider)
    return [
        d for _ in range(copies) for run in profile.runs for d in builder.run_drafts(profile, run)
    ]


def request_of(spans: list[SpanDraft]) -> Encoded:
    encoder = ProtobufSpans()
    body = b"".join(encoder.span(d) for d in spans)
    return Encoded(encoder.request([(spans[0].resource, spans[0].scope, body)]), len(spans))


# -- the SDK's private parts otel-ort reads (otel_ort/export/otlp_transport.py) -------------------


def test_the_grpc_exporters_private_parts_are_still_there() -> None:
    for name in ("_export", "_translate_data", "_count_data", "_initialize_channel_and_stub"):
        assert callable(getattr(OTLPExporterMixin, name, None)), (
            f"the SDK's gRPC exporter lost {name}: otel_ort/export/otlp_transport.py must change"
        )
    exporter: Any = encoded_span_exporter("grpc", "http://127.0.0.1:1")
    try:
        assert exporter._channel is not None, "the gRPC exporter no longer keeps _channel"
        assert callable(exporter._client.Export), "its _client is no longer our bytes stub"
    finally:
        exporter.shutdown()


def test_the_http_exporters_private_parts_are_still_there() -> None:
    exporter: Any = encoded_span_exporter("http/protobuf", "http://127.0.0.1:1")
    assert isinstance(exporter, HttpExporter)
    assert callable(exporter._client.export), "the HTTP exporter's _client.export is gone"
    assert exporter._shutdown is False, "the HTTP exporter's _shutdown flag is gone"
    exporter.shutdown()  # type: ignore[no-untyped-call]
    assert exporter._shutdown is True


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_encoded_requests_go_through_the_sdks_transport_with_its_settings(
    protocol: str, real_profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers and compression from the standard variables reach the receiver, and the bytes
    decode as the spans sent."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team%20a")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    spans = drafts(real_profile)
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        exporter = encoded_span_exporter(protocol, endpoint)
        assert exporter.export_encoded(request_of(spans)) is SpanExportResult.SUCCESS  # type: ignore[attr-defined]
        exporter.shutdown()
        received = receiver.spans()
    assert len(received) == len(spans)
    assert {span.span_id for _, span in received} == {d.span_id.to_bytes(8, "big") for d in spans}
    assert receiver.headers[0]["x-tenant"] == "team a"
    if protocol == "http/protobuf":
        assert receiver.headers[0]["content-encoding"] == "gzip"


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_endpoint_that_is_down_fails_the_export_and_is_counted(
    protocol: str, real_profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    drops = DropCounter()
    inner = encoded_span_exporter(protocol, "http://127.0.0.1:9")  # discard port: closed
    exporter = CountingSpanExporter(inner, Endpoint("http://127.0.0.1:9"), drops, "profiles")
    spans = drafts(real_profile)
    assert exporter.export_encoded(request_of(spans)) is SpanExportResult.FAILURE
    assert exporter.failed == len(spans)
    assert drops.counts() == {"profiles.export_failed": len(spans)}
    inner.shutdown()


# -- the profile processor --------------------------------------------------------------


def test_a_burst_bigger_than_the_queue_waits_for_room_and_loses_nothing(
    real_profile: Path,
) -> None:
    exporter = EncodedExporter(delay_s=0.005)
    drops = DropCounter()
    processor = ProfileExportProcessor(
        exporter, ProtobufSpans(), drops, queue_size=16, batch_size=8, delay_ms=5000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    spans = drafts(real_profile, copies=5)
    assert SpanDelivery(provider).deliver_drafts(spans) == 0
    assert processor.force_flush(10_000)
    processor.shutdown()
    assert exporter.spans == len(spans)
    assert drops.counts() == {}
    assert all(len(request) <= 16 * 1024 for request in exporter.requests)


def test_batches_stay_under_their_byte_limit(real_profile: Path) -> None:
    exporter = EncodedExporter()
    processor = ProfileExportProcessor(exporter, ProtobufSpans(), batch_bytes=4096)
    spans = drafts(real_profile, copies=3)
    assert processor.take_drafts(spans) == set()
    processor.shutdown()
    assert exporter.spans == len(spans)
    assert max(len(request) for request in exporter.requests) <= 4096 + 512  # + the framing


def test_spans_handed_over_during_a_shutdown_are_exported_or_counted(real_profile: Path) -> None:
    for _ in range(20):
        exporter = EncodedExporter()
        drops = DropCounter()
        processor = ProfileExportProcessor(exporter, ProtobufSpans(), drops, queue_size=64)
        spans = drafts(real_profile)
        taking = threading.Thread(target=processor.take_drafts, args=(spans,))
        taking.start()
        processor.shutdown(5_000)
        taking.join()
        dropped = drops.counts().get("profiles.already_shutdown", 0)
        assert exporter.spans + dropped == len(spans)


def test_what_a_shutdown_timeout_leaves_is_counted(real_profile: Path) -> None:
    exporter = EncodedExporter(held=True)  # a collector that never answers
    drops = DropCounter()
    counting = CountingSpanExporter(exporter, Endpoint("x"), drops, "profiles")  # type: ignore[arg-type]
    processor = ProfileExportProcessor(counting, ProtobufSpans(), drops, batch_size=16)
    spans = drafts(real_profile)
    processor.take_drafts(spans)
    started = time.monotonic()
    processor.shutdown(300)
    assert time.monotonic() - started < 2
    assert drops.counts() == {"profiles.shutdown_timeout": len(spans)}


# -- the acceptance: a 10,000-node run's trace, as a receiver gets it -------------------


@pytest.mark.e2e
def test_a_10000_node_runs_trace_fits_tempos_default_limit(tmp_path: Path) -> None:
    """``otel-ort convert`` of a 10,000-node profile (10.6 MB of spans) to a real OTLP
    receiver: what arrives is under 4.5 MB, the longest nodes kept, the rest counted."""
    from bench.profile_spans import large_profile

    path = large_profile(tmp_path, 10_000)
    with OtlpReceiver() as receiver:
        done = subprocess.run(
            [sys.executable, "-m", "otel_ort.cli", "convert", str(path), "--otlp-endpoint",
             receiver.grpc_endpoint],
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        received = receiver.spans()
        size = sum(request.ByteSize() for request in receiver.requests)
    assert size <= 4_500_000
    (run,) = [span for _, span in received if span.name == semconv.SPAN_RUN]
    attributes = {kv.key: kv.value for kv in run.attributes}
    left_out = attributes[semconv.RUN_NODES_NOT_EMITTED].int_value
    assert attributes[semconv.RUN_NOT_EMITTED_LIMIT].string_value == "max_trace_bytes"
    assert left_out > 0 and len(received) - 1 + left_out == 10_000
    assert attributes[semconv.RUN_NOT_EMITTED_COUNTS].array_value.values[0].int_value == left_out
    assert "nodes over --max-trace-bytes summarised on run spans" in done.stdout


# -- the option ----------------------------------------------------------------------------


def test_the_byte_budget_is_an_option_and_a_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_ort.instrumentation.options import parse_options
    from otel_ort.profiles.spans import DEFAULT_MAX_TRACE_BYTES

    assert parse_options({}).profiling.max_trace_bytes == DEFAULT_MAX_TRACE_BYTES == 4_000_000
    assert parse_options({"profile_max_trace_bytes": 1000}).profiling.max_trace_bytes == 1000
    monkeypatch.setenv("OTEL_ORT_PROFILE_MAX_TRACE_BYTES", "2000")
    assert parse_options({}).profiling.max_trace_bytes == 2000
    with pytest.raises(ValueError, match=r"profile_max_trace_bytes=...\) must be a whole number"):
        parse_options({"profile_max_trace_bytes": 0})
    monkeypatch.setenv("OTEL_ORT_PROFILE_MAX_TRACE_BYTES", "4MB")
    assert parse_options({}).profiling.mode == "off"  # a bad variable: logged, not raised
    assert "$OTEL_ORT_PROFILE_MAX_TRACE_BYTES must be a whole number >= 1" in caplog.text

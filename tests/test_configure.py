"""``otel_ort.configure()``: the real OTLP exporters, to a real receiver on loopback."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import configure, flush_profiles, profile_next_run, semconv
from otel_ort.demo_model import mlp_model
from otel_ort.export.configure import Telemetry
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.drops import DropCounter
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint, delivery_report
from otel_ort.export.processors import RequestSpanProcessor
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.instrumentation import wait_for_profiles
from otel_ort.profiles.span_draft import draft_of
from otel_ort.profiles.spans import PROFILE_SCOPE_NAME
from tests.conftest import instrumentation, run_threads
from tests.helpers.example_spans import attributes_of
from tests.helpers.otlp_receiver import OtlpReceiver, free_port

FEEDS = {"x": np.ones((2, 32), np.float32)}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_traces_and_metrics_reach_the_endpoint(protocol: str, tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        telemetry = configure(
            service_name="configured",
            endpoint=endpoint,
            protocol=protocol,
            headers="X-Tenant=ort,Authorization=Bearer%20k1",  # as OTEL_EXPORTER_OTLP_HEADERS
            set_global=False,
        )
        assert telemetry.protocol == protocol
        providers = {
            "tracer_provider": telemetry.tracer_provider,
            "meter_provider": telemetry.meter_provider,
        }
        with instrumentation(**providers, profile_sampler="always", profile_dir=tmp_path / "p"):
            session = ort.InferenceSession(mlp_model(32, 3), providers=["CPUExecutionProvider"])
            session.run(None, FEEDS)  # profiled
            assert flush_profiles(timeout=30)
        telemetry.shutdown()  # flushes both providers
        received = receiver.wait_for_spans(1 + 1 + 3)
        assert semconv.METRIC_RUN_DURATION in receiver.metric_names()
        headers = receiver.headers

    assert telemetry.dropped() == {}
    assert all(h.get("x-tenant") == "ort" and h["authorization"] == "Bearer k1" for h in headers)
    services = {
        kv.value.string_value
        for resource, _ in received
        for kv in resource.attributes
        if kv.key == "service.name"
    }
    assert services == {"configured"}
    spans = [span for _, span in received]
    (profiled,) = [s for s in spans if attributes_of(s).get(semconv.RUN_PROFILED) is True]
    nodes = [s for s in spans if s.parent_span_id == profiled.span_id]
    assert len(nodes) == 3
    assert {s.trace_id for s in nodes} == {profiled.trace_id}
    assert all(semconv.NODE_OP_TYPE in attributes_of(s) for s in nodes)


def test_an_http_endpoint_given_with_its_traces_path_sends_metrics_to_theirs() -> None:
    with OtlpReceiver() as receiver:
        telemetry = configure(
            endpoint=f"{receiver.http_endpoint}/v1/traces", protocol="http/protobuf",
            set_global=False,
        )  # fmt: skip
        telemetry.tracer_provider.get_tracer("t").start_span("request").end()
        telemetry.meter_provider.get_meter("t").create_counter("otel_ort.test").add(1)
        telemetry.shutdown()
        assert len(receiver.wait_for_spans(1)) == 1
        assert "otel_ort.test" in receiver.metric_names()
    assert telemetry.dropped() == {}


def test_a_metrics_endpoint_that_is_down_does_not_drop_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each exporter has its own up/down state: a failed metric export pauses metrics only."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.grpc_endpoint)
        telemetry = configure(set_global=False)
        telemetry.meter_provider.get_meter("t").create_counter("otel_ort.test").add(1)
        telemetry.meter_provider.force_flush()  # fails: the metrics endpoint is down
        tracer = telemetry.tracer_provider.get_tracer("t")
        for _ in range(3):
            tracer.start_span("request").end()
        telemetry.tracer_provider.force_flush()
        assert telemetry.dropped() == {}
        assert len(receiver.wait_for_spans(3)) == 3
        telemetry.shutdown()


@contextlib.contextmanager
def _one_profiled_run(endpoint: str, protocol: str, profile_dir: Path) -> Iterator[Telemetry]:
    """A pipeline to ``endpoint`` holding the spans of one run and one profiled run, none sent
    yet (the export thread waits 5 s); shut down before profiling is uninstrumented."""
    telemetry = configure(endpoint=endpoint, protocol=protocol, set_global=False)
    providers = {
        "tracer_provider": telemetry.tracer_provider,
        "meter_provider": telemetry.meter_provider,
    }
    with instrumentation(**providers, profile_dir=profile_dir):
        session = ort.InferenceSession(mlp_model(32, 3), providers=["CPUExecutionProvider"])
        session.run(None, FEEDS)
        with profile_next_run():
            session.run(None, FEEDS)
        assert wait_for_profiles(30)
        try:
            yield telemetry
        finally:
            telemetry.shutdown(timeout=1)


@contextlib.contextmanager
def _silent_collector() -> Iterator[str]:
    """An endpoint that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"


def test_shutdown_returns_within_its_timeout_from_a_collector_that_never_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "20")  # each export would wait 20 s
    before = set(threading.enumerate())
    with (
        _silent_collector() as endpoint,
        _one_profiled_run(endpoint, "http/protobuf", tmp_path / "p") as telemetry,
    ):
        started = time.monotonic()
        telemetry.shutdown(timeout=1)
        took = time.monotonic() - started
    assert took < 5, f"shutdown(timeout=1) took {took:.1f} s"
    # the session's span and 2 run spans; 3 node spans
    assert telemetry.dropped() == {"requests.shutdown_timeout": 3, "profiles.shutdown_timeout": 3}
    left = {thread.name for thread in set(threading.enumerate()) - before}
    assert "OtelPeriodicExportingMetricReader" not in left  # the metrics reader was stopped


def test_flush_profiles_returns_within_its_timeout_from_a_collector_that_never_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The SDK's force_flush ignores its timeout: it exports every queued span."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "20")
    with _silent_collector() as endpoint, _one_profiled_run(endpoint, "grpc", tmp_path / "p"):
        started = time.monotonic()
        assert not flush_profiles(timeout=1)
        took = time.monotonic() - started
    assert took < 5, f"flush_profiles(timeout=1) took {took:.1f} s"


def test_at_shutdown_exporters_wait_for_a_dead_collector_together_not_in_turn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Request spans, profile spans and the last metrics each have an exporter: in turn, each
    would retry the closed port for about 3 s; the metrics exporter skips a target the span
    exporters found down."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "4")  # retries at about 0, 1 and 3 s
    endpoint = f"http://127.0.0.1:{free_port()}"
    with _one_profiled_run(endpoint, "grpc", tmp_path / "p") as telemetry:
        started = time.monotonic()
        telemetry.shutdown()
        took = time.monotonic() - started
    assert took < 5.5, f"shutdown took {took:.1f} s"  # in turn: 7-11 s
    assert telemetry.dropped() == {"requests.export_failed": 3, "profiles.export_failed": 3}


def test_a_batch_variable_that_is_not_a_number_falls_back_to_the_sdk_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "abc")
    with caplog.at_level(logging.WARNING, logger="otel_ort"):
        telemetry = configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    telemetry.endpoints[0].give_up()
    telemetry.shutdown(timeout=1)
    expected = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE='abc' is not a whole number: using the SDK's default"
    assert expected in caplog.text
    requests, profiles = telemetry.processors
    assert isinstance(requests, RequestSpanProcessor)
    assert isinstance(profiles, ProfileExportProcessor)
    assert requests._batch_processor._max_export_batch_size == profiles._batch_size == 512


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, r"OTEL_BSP_MAX_QUEUE_SIZE='0' must be at least 1"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "-5"}, r"OTEL_BSP_SCHEDULE_DELAY='-5' must be at least 1"),
        (
            {"OTEL_BSP_MAX_QUEUE_SIZE": "100"},  # the batch keeps the SDK's default, 512
            r"BATCH_SIZE=512 \(the default\) is more than OTEL_BSP_MAX_QUEUE_SIZE=100:",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"},
            r"OTEL_EXPORTER_OTLP_TIMEOUT='10s' is not a number of seconds above 0",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "0"},
            r"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='0' is not a number of seconds above 0",
        ),
    ],
    ids=["queue", "delay", "batch-over-queue", "timeout-unit", "traces-timeout"],
)
def test_a_bad_pipeline_variable_is_named_before_any_exporter_thread_starts(
    variables: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's own errors for these name no variable (or, for a gRPC timeout, only say
    that a string is not a float)."""
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value)
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match=message):
        configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    assert set(threading.enumerate()) <= before


def test_a_timeout_variable_written_in_milliseconds_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5000")  # meant: 5 s, as the spec says
    with caplog.at_level(logging.WARNING, logger="otel_ort"):
        telemetry = configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    for endpoint in telemetry.endpoints:
        endpoint.give_up(target_down=True)
    telemetry.shutdown(timeout=1)
    assert "OTEL_EXPORTER_OTLP_TIMEOUT=5000 is read as 5000 seconds" in caplog.text


def test_a_bad_metrics_protocol_fails_before_any_exporter_thread_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")
    before = set(threading.enumerate())
    for _ in range(3):
        with pytest.raises(
            ValueError,
            match=r"'http/json' \(OTEL_EXPORTER_OTLP_METRICS_PROTOCOL\) is not supported",
        ):
            configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    assert set(threading.enumerate()) <= before


def test_shutdown_exports_a_profiled_run_still_being_converted(tmp_path: Path) -> None:
    """A profiled run's spans come from the profile worker: shutdown first waits for it (the
    wait the package registers with it), with no flush_profiles() before."""
    depth = 20
    with OtlpReceiver() as receiver:
        telemetry = configure(endpoint=receiver.grpc_endpoint, set_global=False)
        options = {"tracer_provider": telemetry.tracer_provider, "profile_dir": tmp_path / "p"}
        with instrumentation(**options):
            session = ort.InferenceSession(mlp_model(8, depth), providers=["CPUExecutionProvider"])
            with profile_next_run():
                session.run(None, {"x": np.ones((1, 8), np.float32)})
            telemetry.shutdown(timeout=30)
        received = receiver.spans()
    assert telemetry.dropped() == {}
    assert Counter(span.name for _, span in received)[semconv.SPAN_RUN] == 1
    assert len(received) == 1 + 1 + depth  # the session's span, the run's, its node spans


def test_a_profile_burst_does_not_evict_request_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Request spans have a queue of 64 here, a slow collector takes 30 ms per export, and
    profiles deliver 20 x 60 node spans meanwhile."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "32")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    requests_per_thread, threads, profiled_runs, depth = 40, 4, 20, 60
    with OtlpReceiver(delay_s=0.03) as receiver:
        telemetry = configure(endpoint=receiver.grpc_endpoint, set_global=False)
        tracer = telemetry.tracer_provider.get_tracer("test")
        options = {"tracer_provider": telemetry.tracer_provider, "profile_dir": tmp_path / "p"}
        with instrumentation(**options, profile_sampler="always"):
            session = ort.InferenceSession(mlp_model(8, depth), providers=["CPUExecutionProvider"])

            def requests() -> None:
                for _ in range(requests_per_thread):
                    with tracer.start_as_current_span("request"):
                        time.sleep(0.01)

            workers = [threading.Thread(target=requests) for _ in range(threads)]
            for worker in workers:
                worker.start()
            for _ in range(profiled_runs):
                session.run(None, {"x": np.ones((1, 8), np.float32)})
            for worker in workers:
                worker.join()
            assert flush_profiles(timeout=60)
        telemetry.shutdown()
        expected = threads * requests_per_thread + 1 + profiled_runs + profiled_runs * depth
        received = receiver.wait_for_spans(expected)

    names = Counter(span.name for _, span in received)
    assert telemetry.dropped() == {}
    assert names["request"] == threads * requests_per_thread
    assert names[semconv.SPAN_RUN] == profiled_runs
    assert sum(names.values()) == expected


def test_a_closed_endpoint_drops_are_counted_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    telemetry = configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    tracer = telemetry.tracer_provider.get_tracer("test")
    with caplog.at_level(logging.WARNING, logger="otel_ort"):
        for _ in range(5):
            tracer.start_span("request").end()
        telemetry.tracer_provider.force_flush()
        assert telemetry.dropped() == {"requests.export_failed": 5}
        # the next batches, moments later, are dropped without waiting for the timeout again
        started = time.monotonic()
        for _ in range(3):
            tracer.start_span("request").end()
        telemetry.tracer_provider.force_flush()
        assert time.monotonic() - started < 0.5
        assert telemetry.dropped() == {"requests.export_failed": 8}
        started = time.monotonic()
        telemetry.shutdown()  # the endpoint is down: nothing is tried again, the exit is prompt
        assert time.monotonic() - started < 2
    logged = [r.getMessage() for r in caplog.records if r.name == "otel_ort"]
    assert len(logged) == 2  # the first drop, then once a minute at most, and at shutdown
    assert "5 of requests (export_failed)" in logged[0]
    assert "3 of requests (export_failed)" in logged[1] and "(8 in all" in logged[1]
    assert all(semconv.METRIC_SPANS_DROPPED in line for line in logged)


class _CountingExporter(SpanExporter):
    """Counts what it exports; ``held``: only once released, as a collector that stopped
    reading would (else at once, so the SDK's export thread takes from the queue while spans
    end)."""

    def __init__(self, held: bool) -> None:
        self.release = threading.Event()
        if not held:
            self.release.set()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


def _request_pipeline(exporter: SpanExporter) -> tuple[TracerProvider, DropCounter]:
    drops = DropCounter()
    provider = TracerProvider()
    provider.add_span_processor(RequestSpanProcessor(exporter, drops))
    return provider, drops


def test_the_otlp_report_counts_spans_a_shutdown_left_unsent_as_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's replays: a collector that stopped reading holds an export past the shutdown's
    timeout; its spans were neither sent nor failed, and did not arrive."""
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    held = _CountingExporter(held=True)
    exporter = CountingSpanExporter(held, Endpoint("http://collector:4317"))
    processor = BatchSpanProcessor(exporter)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for _ in range(10):
        provider.get_tracer("t").start_span("run").end()
    processor._batch_processor.shutdown(timeout_millis=200)
    summary, lost = delivery_report(exporter, "http://collector:4317", traces=10, spans=10)
    held.release.set()
    assert "0 of 10 spans (10 traces) sent" in summary
    assert "0 failed to send, 10 dropped, or still unsent when the shutdown timed out" in summary
    assert lost.startswith("10 of 10 spans did not reach http://collector:4317")


def test_profile_spans_handed_over_after_shutdown_are_counted_once_each() -> None:
    """Two processors that are shut down drop the same span: one span lost, and the pipeline's
    drop metric counts it."""
    telemetry = configure(endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    telemetry.tracer_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    for endpoint in telemetry.endpoints:
        endpoint.give_up(target_down=True)
    telemetry.shutdown(timeout=1)
    finished = InMemorySpanExporter()
    builder = TracerProvider()
    builder.add_span_processor(SimpleSpanProcessor(finished))
    for _ in range(3):
        builder.get_tracer(PROFILE_SCOPE_NAME).start_span("node").end()
    spans = [draft_of(span) for span in finished.get_finished_spans()]
    dropped = SpanDelivery(telemetry.tracer_provider).deliver_drafts(spans)
    assert dropped == 3
    assert telemetry.dropped() == {"profiles.already_shutdown": 3}


def test_a_full_request_queue_counts_every_dropped_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    exporter = _CountingExporter(held=True)
    provider, drops = _request_pipeline(exporter)
    tracer = provider.get_tracer("test")
    for _ in range(40):
        tracer.start_span("request").end()
    exporter.release.set()
    provider.shutdown()
    dropped = drops.counts()["requests.queue_full"]
    assert dropped > 0
    assert exporter.exported + dropped == 40


def test_a_span_ending_as_the_pipeline_shuts_down_is_exported_or_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race made certain: the span's add into the SDK's queue waits until the shutdown
    has begun (or 0.3 s). Either the shutdown waits for the add, or the span is counted.
    (The profile processor's twin: tests/test_profile_export.py.)"""
    stream = "requests"
    exporter = _CountingExporter(held=False)
    drops = DropCounter()
    processor = RequestSpanProcessor(exporter, drops)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    batch = processor._batch_processor
    real_emit = batch.emit
    adding = threading.Event()

    def late_emit(span: ReadableSpan) -> None:
        adding.set()
        deadline = time.monotonic() + 0.3
        while not batch._shutdown and time.monotonic() < deadline:
            time.sleep(0.001)
        real_emit(span)

    monkeypatch.setattr(batch, "emit", late_emit)
    tracer = provider.get_tracer("t")
    ending = threading.Thread(target=lambda: tracer.start_span("r").end())
    ending.start()
    assert adding.wait(5)
    provider.shutdown()
    ending.join()
    assert exporter.exported + drops.counts().get(f"{stream}.already_shutdown", 0) == 1


def test_spans_a_shutdown_timeout_leaves_queued_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    exporter = _CountingExporter(held=True)  # a collector that stopped reading
    drops = DropCounter()
    processor = RequestSpanProcessor(exporter, drops)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for _ in range(20):
        provider.get_tracer("t").start_span("r").end()
    processor.shutdown(timeout_millis=200)
    exporter.release.set()
    processor._batch_processor._worker_thread.join(10)
    left = drops.counts()["requests.shutdown_timeout"]
    assert left >= 12 and exporter.exported + left == 20


def test_drops_are_a_metric_by_stream_and_reason() -> None:
    reader = InMemoryMetricReader()
    drops = DropCounter()
    drops.measure_with(MeterProvider(metric_readers=[reader]))
    drops.add("profiles", "export_failed", 7, "test")
    drops.add("requests", "queue_full", 2, "test")
    data = reader.get_metrics_data()
    assert data is not None
    (metric,) = [
        metric
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    ]
    assert metric.name == semconv.METRIC_SPANS_DROPPED
    points = {
        tuple(sorted(dict(p.attributes or {}).items())): p.value
        for p in metric.data.data_points
        if isinstance(p, NumberDataPoint)
    }
    stream, reason = semconv.EXPORT_STREAM, semconv.ERROR_TYPE
    assert points == {
        ((reason, "export_failed"), (stream, "profiles")): 7,
        ((reason, "queue_full"), (stream, "requests")): 2,
    }
    assert drops.counts() == {"profiles.export_failed": 7, "requests.queue_full": 2}


def test_a_forked_child_counts_its_own_drops_under_a_lock_of_its_own() -> None:
    """A pre-forking server's worker: the parent's drops are not its own, and a lock a
    parent's thread held at the fork would stay held there."""
    drops = DropCounter()
    drops.add("requests", "queue_full", 3, "full")
    read_end, write_end = os.pipe()
    with drops._lock:  # held, as by the parent's export thread at the fork
        pid = os.fork()
        if pid == 0:
            try:
                drops.add("profiles", "export_failed", 1, "down")
                os.write(write_end, json.dumps(drops.counts()).encode())
            finally:
                os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        ready, _, _ = select.select([pipe], [], [], 30)
        child = json.loads(pipe.read()) if ready else "the child hung on the parent's lock"
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert child == {"profiles.export_failed": 1}
    assert drops.counts() == {"requests.queue_full": 3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protocol": "http/json"}, r"OTLP protocol 'http/json' \(protocol=\) is not supported"),
        ({"headers": "x-key"}, "OTLP header 'x-key' is not key=value"),
        ({"profile_queue_size": 0}, "profile_queue_size must be at least 1"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        configure(set_global=False, **kwargs)  # type: ignore[arg-type]


def test_a_bad_protocol_variable_is_the_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grcp")
    with pytest.raises(ValueError, match=r"'grcp' \(OTEL_EXPORTER_OTLP_METRICS_PROTOCOL\)"):
        configure(set_global=False)


@pytest.fixture
def no_global_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure() may build the process's pipeline, but the test process's globals stay."""
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    monkeypatch.setattr(trace, "set_tracer_provider", lambda provider: None)
    monkeypatch.setattr(metrics, "set_meter_provider", lambda provider: None)


@pytest.mark.usefixtures("no_global_set_up")
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "console",
            r"'console': .* takes otlp or none: one value, not a list; for other exporters leave",
        ),
        ("otlp,console", r"'otlp,console': .* takes otlp or none: one value, not a list"),
        (
            "otlp_proto_http",
            r"'otlp_proto_http': .* takes otlp or none: write otlp and choose the protocol with",
        ),
    ],
    ids=["console", "list", "otlp_proto_http"],
)
@pytest.mark.parametrize("variable", ["OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"])
def test_an_exporter_other_than_otlp_is_refused(
    variable: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=rf"{variable}={message}"):
        configure()
    configure(set_global=False).shutdown()  # a pipeline of its own does not read them


@pytest.mark.usefixtures("no_global_set_up")
def test_traces_exporter_none_exports_metrics_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "OTLP")
    with OtlpReceiver() as receiver:
        telemetry = configure(endpoint=receiver.grpc_endpoint)
        with telemetry.tracer_provider.get_tracer("test").start_as_current_span("kept"):
            pass
        telemetry.meter_provider.get_meter("test").create_counter("exported").add(1)
        telemetry.shutdown()
        assert "exported" in receiver.metric_names()
        assert receiver.spans() == []  # shutdown flushed: none was sent


def test_an_existing_sdk_set_up_is_not_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    existing = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: existing)
    with pytest.raises(
        RuntimeError, match=r"already set \(by an earlier configure\(\), .* keep one"
    ):
        configure()


def test_drops_are_counted_exactly_while_the_export_thread_takes_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
    exporter = _CountingExporter(held=False)
    provider, drops = _request_pipeline(exporter)
    tracer = provider.get_tracer("test")
    threads, spans = 4, 3000

    def end_spans() -> None:
        for _ in range(spans):
            tracer.start_span("request").end()

    workers = [threading.Thread(target=end_spans) for _ in range(threads)]
    run_threads(workers)
    provider.shutdown()
    dropped = drops.counts()["requests.queue_full"]
    assert dropped > 0
    assert exporter.exported + dropped == threads * spans

"""Fixtures: in-memory SDK providers, an instrumented ORT, and real models on disk."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import OrtInstrumentor
from otel_ort.demo_model import mlp_model
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import Encoded
from otel_ort.export.profile_export import ProfileExportProcessor

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def file_spans(path: Path) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON-lines file (one export request per line), as dicts."""
    return [
        span
        for line in path.read_text().splitlines()
        for resource_spans in json.loads(line)["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]


@functools.cache
def cuda_missing() -> str | None:
    """Why CUDA sessions cannot run here (onnxruntime-gpu and an NVIDIA GPU), or None."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} is built without CUDA (install onnxruntime-gpu)"
    try:
        session = ort.InferenceSession(mlp_model(width=8, depth=1), providers=CUDA)
    except Exception as exc:
        return f"ORT could not open a CUDA session here: {exc}"
    if "CUDAExecutionProvider" not in session.get_providers():
        return "ORT could not open a CUDA session here (no NVIDIA GPU or CUDA libraries)"
    return None


def run_threads(threads: list[threading.Thread]) -> None:
    """Start every thread, then wait for all of them."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def hammer(
    session: Any, feeds: dict[str, Any], threads: int, seconds: float
) -> list[BaseException]:
    """Run ``session`` on ``threads`` threads for ``seconds``, each run checked against a run
    made first; what the runs raised (an assertion: other outputs)."""
    want = session.run(None, feeds)[0].tobytes()
    deadline = time.monotonic() + seconds
    failed: list[BaseException] = []

    def runs() -> None:
        try:
            while time.monotonic() < deadline:
                assert session.run(None, feeds)[0].tobytes() == want
        except BaseException as exc:
            failed.append(exc)

    run_threads([threading.Thread(target=runs) for _ in range(threads)])
    return failed


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A finished span's attributes as a plain dict."""
    return dict(span.attributes or {})


class EncodedExporter:
    """An exporter of otel-ort's profile span processor: takes its encoded requests (after
    ``delay_s`` each; ``held`` until released), counts their spans."""

    def __init__(self, delay_s: float = 0.0, held: bool = False) -> None:
        self.delay_s = delay_s
        self.spans = 0
        self.requests: list[bytes] = []
        self.release = threading.Event()
        if not held:
            self.release.set()

    def export_encoded(self, batch: Encoded) -> SpanExportResult:
        self.release.wait()
        time.sleep(self.delay_s)
        self.spans += batch.spans
        self.requests.append(batch.request)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


class Telemetry:
    """What an instrumented test produced: finished spans and metric points. ``encoded``:
    profile spans go to otel-ort's own processor (``encoded``), so that profiles are
    converted in the conversion process; ``spans`` then holds the other spans only."""

    def __init__(self, encoded: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        memory = SimpleSpanProcessor(self.exporter)
        self.tracer_provider.add_span_processor(memory)
        self.encoded = EncodedExporter()
        if encoded:
            memory.takes_profile_spans = False  # type: ignore[attr-defined]
            self.tracer_provider.add_span_processor(
                ProfileExportProcessor(self.encoded, ProtobufSpans(), delay_ms=0)
            )
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metric_reader])

    @property
    def providers(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def points(self, metric_name: str) -> list[Any]:
        data = self.metric_reader.get_metrics_data()
        points: list[Any] = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == metric_name:
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@contextmanager
def instrumentation(**options: Any) -> Iterator[None]:
    """ORT instrumented with ``options`` inside the block, uninstrumented after it."""
    instrumentor = OrtInstrumentor()
    instrumentor.instrument(**options)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def instrumented(telemetry: Telemetry) -> Iterator[Telemetry]:
    """ORT instrumented with in-memory providers for the whole test."""
    with instrumentation(**telemetry.providers):
        yield telemetry


@pytest.fixture(scope="session")
def mlp_bytes() -> bytes:
    return mlp_model(width=32, depth=2)


@pytest.fixture(scope="session")
def mlp_path(tmp_path_factory: pytest.TempPathFactory, mlp_bytes: bytes) -> Path:
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    path.write_bytes(mlp_bytes)
    return path


class _HeldRuns:
    """ORT's C++ session behind an ``InferenceSession``: its ``run`` waits until let go."""

    def __init__(self, sess: Any, waiting: threading.Event, go: threading.Event) -> None:
        self._sess, self._waiting, self._go = sess, waiting, go

    def run(self, *args: Any) -> Any:
        self._waiting.set()
        self._go.wait()
        return self._sess.run(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)


def held_runs(session: ort.InferenceSession) -> tuple[threading.Event, threading.Event]:
    """Make ``session.run`` wait just before ORT's C++ run, inside otel-ort's wrapper (the run
    is in flight): (set when one waits, set to let go)."""
    waiting, go = threading.Event(), threading.Event()
    session._sess = _HeldRuns(session._sess, waiting, go)
    return waiting, go

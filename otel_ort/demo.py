"""The main job on the embedded default: an instrumented session, its spans and metrics.

``otel-ort demo`` builds a small MLP, instruments ONNX Runtime with in-process SDK providers,
serves a few "requests" (one of them failing on purpose), prints the span tree and a latency
table, and writes every span to an OTLP/JSON lines file. No server is needed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import numpy as np
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import semconv
from otel_ort.console import render_span_tree
from otel_ort.demo_model import mlp_model
from otel_ort.export import OtlpJsonFileSpanExporter
from otel_ort.instrumentation import OrtInstrumentor
from otel_ort.tables import format_table

SERVICE_NAME = "otel-ort-demo"


def run_demo(output_dir: Path, requests: int = 20, out: TextIO | None = None) -> Path:
    """Run the demo, reporting on ``out`` (stdout); return the path of the spans file."""
    out = out or sys.stdout
    import onnxruntime as ort

    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = output_dir / "mlp.onnx"
    model_path.write_bytes(mlp_model(width=256, depth=4))
    spans_path = output_dir / "spans.otlp.jsonl"
    spans_path.unlink(missing_ok=True)

    resource = Resource.create({"service.name": SERVICE_NAME})
    tracer_provider = TracerProvider(resource=resource)
    file_exporter = OtlpJsonFileSpanExporter(spans_path)
    tracer_provider.add_span_processor(BatchSpanProcessor(file_exporter))
    in_memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(in_memory))
    metric_reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[metric_reader], resource=resource)

    instrumentor = OrtInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    tracer = tracer_provider.get_tracer("otel_ort.demo")
    rng = np.random.default_rng(0)
    try:
        with tracer.start_as_current_span("demo.job"):
            session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
            for index in range(requests):
                with tracer.start_as_current_span("demo.request") as request:
                    request.set_attribute("demo.request.index", index)
                    batch = rng.standard_normal((8, 256), dtype=np.float32)
                    session.run(None, {"x": batch})
            with tracer.start_as_current_span("demo.bad_request"):
                try:  # a wrong shape: ORT raises, the span records it, the caller sees ORT's error
                    session.run(None, {"x": np.zeros((8, 3), np.float32)})
                except Exception as exc:
                    print(f"a bad request failed as ORT intended: {type(exc).__name__}", file=out)
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()

    print(f"\nSpan tree ({requests} requests, one failing on purpose):\n", file=out)
    print(render_span_tree(in_memory.get_finished_spans(), max_children=4), file=out)
    print("\nRun latency, from the onnxruntime.run.duration histogram:\n", file=out)
    print(_latency_table(metric_reader), file=out)
    print(f"\nmodel:  {model_path}", file=out)
    print(f"spans:  {spans_path}  (OTLP/JSON lines, one export batch per line)", file=out)
    return spans_path


def _latency_table(reader: InMemoryMetricReader) -> str:
    rows = [("model", "provider", "error.type", "runs", "mean ms")]
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name != semconv.METRIC_RUN_DURATION:
                    continue
                for point in metric.data.data_points:
                    if isinstance(point, HistogramDataPoint):
                        attributes = point.attributes or {}
                        rows.append(
                            (
                                os.path.basename(str(attributes.get(semconv.MODEL_PATH, ""))),
                                str(attributes.get(semconv.SESSION_PROVIDER, "")),
                                str(attributes.get(semconv.ERROR_TYPE, "-")),
                                str(point.count),
                                f"{point.sum / max(point.count, 1) * 1e3:.3f}",
                            )
                        )
    return format_table(rows)

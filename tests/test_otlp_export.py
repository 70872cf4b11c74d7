"""Run spans through the real OTLP exporters to a real receiver on loopback, decoded on arrival."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_ort import OrtInstrumentor, semconv
from tests.helpers.example_spans import attributes_of
from tests.helpers.otlp_receiver import OtlpReceiver


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_run_spans_reach_a_real_otlp_receiver(protocol: str, mlp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        exporter: SpanExporter
        if protocol == "grpc":
            exporter = GrpcSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
        else:
            exporter = HttpSpanExporter(endpoint=f"{receiver.http_endpoint}/v1/traces")
        provider = TracerProvider(resource=Resource.create({"service.name": "otlp-test"}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        instrumentor = OrtInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            tracer = provider.get_tracer("test")
            with tracer.start_as_current_span("request") as request:
                session = ort.InferenceSession(mlp_path, providers=["CPUExecutionProvider"])
                session.run(None, {"x": np.ones((2, 32), np.float32)})
        finally:
            instrumentor.uninstrument()
            provider.shutdown()  # flushes through the exporter
        received = receiver.wait_for_spans(3)

    by_name = {span.name: (resource, span) for resource, span in received}
    assert set(by_name) == {"request", semconv.SPAN_SESSION_CREATE, semconv.SPAN_RUN}
    resource, run = by_name[semconv.SPAN_RUN]
    service = {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"]
    assert service == "otlp-test"
    request_context = request.get_span_context()
    assert run.trace_id == request_context.trace_id.to_bytes(16, "big")
    assert run.parent_span_id == request_context.span_id.to_bytes(8, "big")
    attributes = attributes_of(run)
    assert attributes[semconv.MODEL_PATH] == str(mlp_path)
    assert attributes[semconv.RUN_INPUTS] == ("x:float32[2,32]",)
    assert attributes[semconv.SESSION_PROVIDERS] == ("CPUExecutionProvider",)
    assert attributes[semconv.RUN_PROFILED] is False
    assert run.end_time_unix_nano > run.start_time_unix_nano

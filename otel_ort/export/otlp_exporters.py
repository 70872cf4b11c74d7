"""The SDK's standard OTLP exporters (gRPC or HTTP/protobuf, traces or metrics), built for
``configure()`` and the CLI commands that send spans over OTLP.

The exporter module is imported on first use, so gRPC is imported only by those who use it.
"""

from __future__ import annotations

import importlib
from typing import Literal, cast

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from otel_ort.export.settings import http_url

_EXPORTERS = {  # module (under ...otlp.proto.grpc / .http) and class of each signal
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
}


def otlp_span_exporter(protocol: str, endpoint: str | None = None) -> SpanExporter:
    """The standard OTLP span exporter for ``protocol``; ``endpoint`` ``None``: from the env."""
    return cast(SpanExporter, otlp_exporter("traces", protocol, endpoint, None, None))


def otlp_exporter(
    signal: Literal["traces", "metrics"],
    protocol: str,
    endpoint: str | None,
    headers: dict[str, str] | None,
    insecure: bool | None,
) -> SpanExporter | MetricExporter:
    """The standard OTLP exporter of ``signal``; ``None`` arguments come from the env."""
    module = f"opentelemetry.exporter.otlp.proto.{'grpc' if protocol == 'grpc' else 'http'}"
    submodule, class_name = _EXPORTERS[signal]
    exporter_class = getattr(importlib.import_module(f"{module}.{submodule}"), class_name)
    exporter: SpanExporter | MetricExporter
    if protocol == "grpc":
        exporter = exporter_class(endpoint=endpoint, headers=headers, insecure=insecure)
    else:
        exporter = exporter_class(endpoint=http_url(endpoint, signal), headers=headers)
    return exporter

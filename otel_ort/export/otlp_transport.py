"""Encoded OTLP requests sent through the SDK's own OTLP span exporters' transport.

Profile spans are encoded by otel-ort (:mod:`otel_ort.export.otlp_encoding`); their requests go out
through the standard exporters, so that every ``OTEL_EXPORTER_OTLP_*`` setting (endpoint,
headers, compression, TLS, timeout) and the SDK's retries keep working. Those exporters take
only SDK spans, so this module uses their private parts: it overrides three gRPC methods by
name (``tests/test_profile_export.py`` checks the SDK still has them), and reads the others
through :mod:`otel_ort.export.sdk_internals` (each with a contract test in
``tests/test_sdk_internals.py``):

- gRPC (``OTLPExporterMixin``): ``_export(data)`` (its retry loop) calls
  ``_translate_data(data)`` and ``_count_data(data)``, and sends through ``_client.Export``,
  a stub made on ``_channel`` by ``_initialize_channel_and_stub`` (again on reconnection).
  Here the stub sends bytes as they are.
- HTTP: ``_client.export(body)`` (compression, headers, retries, timeout) returns a result
  with ``success``; ``_shutdown`` says the exporter was shut down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.sdk_internals import (
    grpc_channel,
    grpc_export,
    http_post,
    http_shut_down,
    set_grpc_stub,
)
from otel_ort.profiles.span_draft import draft_of

_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Encoded:
    """An encoded ``ExportTraceServiceRequest`` of ``spans`` spans."""

    __slots__ = ("request", "spans")

    def __init__(self, request: bytes, spans: int) -> None:
        self.request = request
        self.spans = spans


def encode_readable(spans: Sequence[ReadableSpan], encoder: ProtobufSpans) -> Encoded:
    """SDK spans as one request, grouped by resource and scope as the SDK groups them."""
    groups: dict[tuple[int, int], tuple[Any, Any, list[bytes]]] = {}
    for span in spans:
        key = (id(span.resource), id(span.instrumentation_scope))
        entry = groups.setdefault(key, (span.resource, span.instrumentation_scope, []))
        entry[2].append(encoder.span(draft_of(span)))
    request = encoder.request([(r, s, b"".join(parts)) for r, s, parts in groups.values()])
    return Encoded(request, len(spans))


class EncodedExport(Protocol):
    """An exporter that sends encoded requests (the exporters of :func:`encoded_span_exporter`,
    ``CountingSpanExporter`` around one, the OTLP/JSON file exporter)."""

    def export_encoded(self, batch: Encoded) -> SpanExportResult: ...

    def shutdown(self) -> None: ...


def encoded_span_exporter(
    protocol: str,
    endpoint: str | None = None,
    headers: dict[str, str] | None = None,
    insecure: bool | None = None,
) -> SpanExporter:
    """The standard OTLP span exporter for ``protocol`` (``endpoint``: for HTTP, the base URL),
    which also sends encoded requests (``export_encoded``); ``None`` arguments come from the
    environment, as for the SDK's own."""
    if protocol == "grpc":
        grpc_exporter: SpanExporter = _grpc_class()(
            endpoint=endpoint, headers=headers, insecure=insecure
        )
        return grpc_exporter
    url = None
    if endpoint is not None:
        base = endpoint.rstrip("/").removesuffix("/v1/traces").removesuffix("/v1/metrics")
        url = f"{base}/v1/traces"
    http_exporter: SpanExporter = _http_class()(endpoint=url, headers=headers)
    return http_exporter


_CLASSES: dict[str, type] = {}


def _grpc_class() -> type:
    """The SDK's gRPC span exporter, its stub sending bytes as they are (made on first use:
    gRPC is imported only by those who use it)."""
    made = _CLASSES.get("grpc")
    if made is not None:
        return made
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    class EncodedGrpcSpanExporter(OTLPSpanExporter):
        """The SDK's gRPC span exporter; its requests are bytes encoded beforehand."""

        def _initialize_channel_and_stub(self) -> None:
            super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
            set_grpc_stub(
                self, _BytesStub(grpc_channel(self), ExportTraceServiceResponse.FromString)
            )

        def _translate_data(self, data: Any) -> Any:
            if not isinstance(data, Encoded):
                data = encode_readable(data, ProtobufSpans())
            return data.request

        def _count_data(self, data: Any) -> int:
            return data.spans if isinstance(data, Encoded) else len(data)

        def export_encoded(self, batch: Encoded) -> SpanExportResult:
            """Send an encoded request (the SDK's retries, timeout, headers, compression)."""
            return grpc_export(self, batch)

    made = _CLASSES["grpc"] = EncodedGrpcSpanExporter
    return made


def _http_class() -> type:
    """The SDK's HTTP/protobuf span exporter, sending encoded requests too."""
    made = _CLASSES.get("http")
    if made is not None:
        return made
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    class EncodedHttpSpanExporter(OTLPSpanExporter):
        """The SDK's HTTP/protobuf span exporter, which also sends encoded requests."""

        def export_encoded(self, batch: Encoded) -> SpanExportResult:
            """Send an encoded request (the SDK's retries, timeout, headers, compression)."""
            if http_shut_down(self):
                return SpanExportResult.FAILURE
            sent = http_post(self, batch.request)
            return SpanExportResult.SUCCESS if sent else SpanExportResult.FAILURE

    made = _CLASSES["http"] = EncodedHttpSpanExporter
    return made


class _BytesStub:
    """A ``TraceService`` stub whose ``Export`` takes the request's bytes."""

    def __init__(self, channel: Any, deserialize: Any) -> None:
        self.Export = channel.unary_unary(
            _EXPORT_METHOD, request_serializer=None, response_deserializer=deserialize
        )

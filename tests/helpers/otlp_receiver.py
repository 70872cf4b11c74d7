"""A real OTLP receiver on loopback: gRPC and HTTP/protobuf, as a Collector would listen.

Built from opentelemetry-proto's generated services and a plain HTTP server; every request
that arrives is decoded (``ExportTraceServiceRequest``, ``ExportMetricsServiceRequest``) and
kept for the test to read.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def free_port() -> int:
    """A loopback port nothing listens on (until someone binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as receiver:``; endpoints are ``grpc_endpoint`` and
    ``http_endpoint``; ``delay_s`` makes every export that slow."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s  # each export waits this long: a busy collector
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metric_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []  # of every request, keys lowercase
        self._lock = threading.Lock()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), self._grpc
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _MetricsServicer(self), self._grpc
        )
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.http_port = self._http.server_address[1]
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def __enter__(self) -> OtlpReceiver:
        self._grpc.start()
        self._http_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._grpc.stop(grace=None)
        self._http.shutdown()
        self._http.server_close()

    def accept(self, request: Any, headers: dict[str, str]) -> None:
        time.sleep(self.delay_s)
        with self._lock:
            self.headers.append(headers)
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.requests.append(request)
            else:
                self.metric_requests.append(request)

    def metric_names(self) -> set[str]:
        """The names of every metric received so far."""
        with self._lock:
            return {
                metric.name
                for request in self.metric_requests
                for resource_metrics in request.resource_metrics
                for scope_metrics in resource_metrics.scope_metrics
                for metric in scope_metrics.metrics
            }

    def spans(self) -> list[tuple[Any, Span]]:
        """(resource, span) for every span received so far."""
        with self._lock:
            return [
                (resource_spans.resource, span)
                for request in self.requests
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]

    def wait_for_spans(self, count: int, timeout: float = 20.0) -> list[tuple[Any, Span]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.spans()
            if len(spans) >= count:
                return spans
            time.sleep(0.05)
        return self.spans()


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        self._receiver.accept(request, dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        self._receiver.accept(request, dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


_HTTP_MESSAGES: dict[str, tuple[Any, Any]] = {
    "/v1/traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "/v1/metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
}


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            messages = _HTTP_MESSAGES.get(self.path)
            if messages is None or "protobuf" not in self.headers.get("Content-Type", ""):
                self.send_error(404 if messages is None else 415)
                return
            request_type, response_type = messages
            request = request_type()
            request.ParseFromString(body)
            receiver.accept(request, {key.lower(): value for key, value in self.headers.items()})
            payload = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler

"""A real OTLP trace receiver on loopback: gRPC and HTTP/protobuf, as a Collector would listen.

Built from opentelemetry-proto's generated service and a plain HTTP server; every request
that arrives is decoded into an ``ExportTraceServiceRequest`` and kept for the test to read.
"""

from __future__ import annotations

import gzip
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as receiver:``; endpoints are ``grpc_endpoint`` and
    ``http_endpoint``."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), self._grpc
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

    def accept(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests.append(request)

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
        self._receiver.accept(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or "protobuf" not in self.headers.get("Content-Type", ""):
                self.send_error(404 if self.path != "/v1/traces" else 415)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            receiver.accept(request)
            payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler

"""Span exporters otel-ort adds to the SDK's: OTLP/JSON lines written to a local file."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ort.forking import renew_locks_in_child

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpJsonFileSpanExporter(SpanExporter):
    """Append each batch as one line of OTLP/JSON (an ``ExportTraceServiceRequest``).

    The format is the OpenTelemetry Collector's ``file`` exporter's and the one its
    ``otlpjsonfile`` receiver reads back: ids in hex, enums as integers, camelCase keys.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.failed = 0
        """Spans that could not be written."""
        self.problem = ""
        """Why the last of them could not."""
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for resource_spans in request.get("resourceSpans", ()):
            for scope_spans in resource_spans.get("scopeSpans", ()):
                for span in scope_spans.get("spans", ()):
                    _ids_to_hex(span)
                    for link in span.get("links", ()):
                        _ids_to_hex(link)
        line = (json.dumps(request, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                if self._fd is None:
                    raise OSError("the file was closed at shutdown")
                _append(self._fd, line)
            except OSError as exc:  # a full disk, say: counted, and the exporter goes on
                self.failed += len(spans)
                self.problem = str(exc)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _append(fd: int, line: bytes) -> None:
    """Write ``line`` whole at the end of ``fd``'s file, or leave nothing of it there (the
    next batch would be glued to a part of it: two lines lost)."""
    start = os.lseek(fd, 0, os.SEEK_END)
    view = memoryview(line)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def _ids_to_hex(item: dict[str, Any]) -> None:
    # protobuf's JSON mapping writes bytes as base64; OTLP/JSON wants lowercase hex
    for field in _ID_FIELDS:
        if field in item:
            item[field] = _base64_to_hex(item[field])


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()

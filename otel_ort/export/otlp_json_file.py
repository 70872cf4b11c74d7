"""Span exporters otel-ort adds to the SDK's: OTLP/JSON lines written to a local file."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ort._util.forking import renew_locks_in_child
from otel_ort.export.otlp_encoding import JsonSpans
from otel_ort.export.otlp_transport import Encoded
from otel_ort.profiles.span_draft import draft_of


class OtlpJsonFileSpanExporter(SpanExporter):
    """Append each batch as one line of OTLP/JSON (an ``ExportTraceServiceRequest``).

    The format is the OpenTelemetry Collector's ``file`` exporter's and the one its
    ``otlpjsonfile`` receiver reads back: ids in hex, enums as integers, camelCase keys.
    Profile spans come already encoded (``export_encoded``, from
    :class:`otel_ort.export.profile_export.ProfileExportProcessor` with :class:`JsonSpans`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.failed = 0
        """Spans that could not be written."""
        self.problem = ""
        """Why the last of them could not."""
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")
        self._encoding = JsonSpans()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        groups: dict[tuple[int, int], tuple[Any, Any, list[bytes]]] = {}
        with self._lock:  # the encoding's attribute cache is not shared between threads
            for span in spans:
                key = (id(span.resource), id(span.instrumentation_scope))
                entry = groups.setdefault(key, (span.resource, span.instrumentation_scope, []))
                entry[2].append(self._encoding.span(draft_of(span)))
            line = self._encoding.request(
                [(resource, scope, b",".join(parts)) for resource, scope, parts in groups.values()]
            )
        return self.export_encoded(Encoded(line, len(spans)))

    def export_encoded(self, batch: Encoded) -> SpanExportResult:
        """Append one OTLP/JSON line (newline included) of ``batch.spans`` spans."""
        with self._lock:
            try:
                if self._fd is None:
                    raise OSError("the file was closed at shutdown")
                _append(self._fd, batch.request)
            except OSError as exc:  # a full disk, say: counted, and the exporter goes on
                self.failed += batch.spans
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

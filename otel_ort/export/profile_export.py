"""The profile spans' batch processor: drafts encoded in the delivering thread, batched by
bytes and sent as encoded OTLP requests from a thread of its own.

A profile is a burst of thousands of spans. The processor holds ``queue_size`` spans at most:
a delivery that finds it full waits until the export thread has made room (back-pressure on
the profile worker, nothing dropped). A batch is at most ``batch_size`` spans and
``batch_bytes`` bytes (an OpenTelemetry Collector's gRPC receiver refuses messages over
4 MiB by default), sent when full, else ``delay_ms`` after its first span, at a flush or at
shutdown. Spans it cannot take (it was shut down) are dropped and counted; so are those a
shutdown's timeout leaves queued or in an export (``shutdown_timeout``). Export failures are
the exporter's to count (``CountingSpanExporter``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_ort._util.forking import after_fork_in_child
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.export.otlp_transport import Encoded, EncodedExport
from otel_ort.failures import report_failure
from otel_ort.profiles.span_draft import SpanDraft, draft_of
from otel_ort.profiles.spans import PROFILE_SCOPE_NAME

MAX_BATCH_BYTES = 1 << 20
"""A request's spans, at most: a quarter of a Collector's default gRPC message limit."""


class Drops(Protocol):
    """Where dropped spans are counted (``otel_ort.export.drops.DropCounter``)."""

    def add(self, stream: str, reason: str, count: int, why: str) -> None: ...


_Entry = tuple[Resource, InstrumentationScope | None, bytes]


class ProfileExportProcessor(SpanProcessor):
    """Queues profile spans as encoded bytes and exports them in batches."""

    stream = "profiles"
    takes_profile_spans = True

    def __init__(
        self,
        exporter: EncodedExport,
        encoding: ProtobufSpans | JsonSpans,
        drops: Drops | None = None,
        *,
        queue_size: int = 8192,
        batch_size: int = 512,
        batch_bytes: int = MAX_BATCH_BYTES,
        delay_ms: int = 5000,
    ) -> None:
        if queue_size < 1 or batch_size < 1 or batch_bytes < 1:
            raise ValueError("queue_size, batch_size and batch_bytes must be at least 1")
        self.exporter = exporter
        self._encoding = encoding
        self._joiner = b"," if isinstance(encoding, JsonSpans) else b""
        self._drops = drops
        self._queue_size = queue_size
        self._batch_size = min(batch_size, queue_size)
        self._batch_bytes = batch_bytes
        self._delay_s = delay_ms / 1000
        self._reset()
        after_fork_in_child(self, ProfileExportProcessor._reset)

    def _reset(self) -> None:
        """A fresh state, its export thread started by the first spans (also in a forked
        child: the parent's queue holds the parent's spans, and no thread is started inside
        a fork hook)."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[_Entry] = deque()
        self._queued_bytes = 0
        self._first_at = 0.0  # when the oldest queued span came
        self._flushes = 0  # flushes asked for; the export thread sends all it holds
        self._in_export = 0  # spans in the export under way
        self._closed = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    # -- taking spans ----------------------------------------------------------------------

    @property
    def encoding_name(self) -> str:
        """The OTLP encoding it exports: ``protobuf`` or ``json``."""
        return "json" if isinstance(self._encoding, JsonSpans) else "protobuf"

    def take_drafts(self, drafts: Sequence[SpanDraft]) -> set[int]:
        """Encode and queue ``drafts``, waiting for room while the queue is full; the
        indexes of those dropped (the processor was shut down), counted."""
        encoded = self._encoding.spans(list(drafts))
        entries = [(d.resource, d.scope, span) for d, span in zip(drafts, encoded, strict=True)]
        return self._queue_entries(entries)

    def take_encoded(
        self, resource: Resource, scope: InstrumentationScope | None, spans: Sequence[bytes]
    ) -> set[int]:
        """Queue spans already encoded in this processor's encoding (``encoding_name``), all of
        ``resource`` and ``scope``, as ``take_drafts`` does."""
        return self._queue_entries([(resource, scope, span) for span in spans])

    def _queue_entries(self, entries: list[_Entry]) -> set[int]:
        taken = 0
        with self._changed:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="otel-ort-profile-export", daemon=True
                )
                self._thread.start()
            while taken < len(entries) and not self._closed:
                room = self._queue_size - len(self._queue)
                if room <= 0:
                    self._changed.notify_all()  # the export thread: a full queue is a batch
                    self._changed.wait()
                    continue
                for entry in entries[taken : taken + room]:
                    self._queue.append(entry)
                    self._queued_bytes += len(entry[2])
                if not self._first_at:
                    self._first_at = time.monotonic()
                taken += min(room, len(entries) - taken)
                self._changed.notify_all()
        if taken < len(entries) and self._drops is not None:
            self._drops.add(
                self.stream, "already_shutdown", len(entries) - taken, "the pipeline was shut down"
            )
        return set(range(taken, len(entries)))

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        """A profile span made elsewhere; others (the tracer's) are not this processor's."""
        scope = span.instrumentation_scope
        if scope is not None and scope.name == PROFILE_SCOPE_NAME:
            self.take_drafts([draft_of(span)])

    # -- exporting -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._ready():
                    if self._stopped:
                        return
                    self._changed.wait(self._wait_s())
                batch = self._take_batch()
                self._in_export = len(batch)
            try:
                self._export(batch)
            finally:
                with self._changed:
                    self._in_export = 0
                    self._changed.notify_all()

    def _ready(self) -> bool:
        if not self._queue:
            return False
        return (
            self._flushes > 0
            or self._closed
            or len(self._queue) >= self._batch_size
            or self._queued_bytes >= self._batch_bytes
            or time.monotonic() - self._first_at >= self._delay_s
        )

    def _wait_s(self) -> float | None:
        if not self._queue:
            return None
        return max(0.0, self._first_at + self._delay_s - time.monotonic())

    def _take_batch(self) -> list[_Entry]:
        batch: list[_Entry] = []
        size = 0
        queue = self._queue
        while queue and len(batch) < self._batch_size:
            entry = queue[0]
            if batch and size + len(entry[2]) > self._batch_bytes:
                break
            batch.append(queue.popleft())
            size += len(entry[2])
        self._queued_bytes -= size
        self._first_at = time.monotonic() if queue else 0.0
        if not queue and self._flushes:
            self._flushes = 0
        return batch

    def _export(self, batch: list[_Entry]) -> None:
        groups: dict[tuple[int, int], tuple[Resource, InstrumentationScope | None, list[bytes]]]
        groups = {}
        for resource, scope, encoded in batch:
            key = (id(resource), id(scope))
            groups.setdefault(key, (resource, scope, []))[2].append(encoded)
        request = self._encoding.request(
            [
                (resource, scope, self._joiner.join(spans))
                for resource, scope, spans in groups.values()
            ]
        )
        try:
            self.exporter.export_encoded(Encoded(request, len(batch)))
        except Exception:  # an exporter bug: said, and this thread goes on
            report_failure("a profile span exporter raised")

    # -- flush and shutdown ----------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export everything queued now; whether it was done within the timeout."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._changed:
            self._flushes += 1
            self._changed.notify_all()
            return self._changed.wait_for(
                lambda: not self._queue and not self._in_export,
                max(0.0, deadline - time.monotonic()),
            )

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Take no more spans, export those queued within the timeout, count what it left
        queued or in an export, shut the exporter down."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
            self._changed.wait_for(
                lambda: not self._queue and not self._in_export,
                max(0.0, deadline - time.monotonic()),
            )
            left = len(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
            self._stopped = True
            self._changed.notify_all()
        abandon = getattr(self.exporter, "abandon_in_flight", None)
        if callable(abandon):
            left += abandon()
        if left and self._drops is not None:
            why = "the export did not finish by the shutdown's deadline"
            self._drops.add(self.stream, "shutdown_timeout", left, why)
        self.exporter.shutdown()

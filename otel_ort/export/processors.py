"""The request spans' batch processor: the SDK's, counting every span it drops.

Request spans (every ``onnxruntime.run`` and the caller's own spans) have a processor of
their own, apart from the profile spans' (:mod:`otel_ort.export.profile_export`), so a
profile burst can never evict a request span. A request span that finds its queue full is
dropped and counted (:class:`otel_ort.export.drops.DropCounter`).
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_ort._util.forking import renew_locks_in_child
from otel_ort.export.drops import DropCounter
from otel_ort.export.endpoint import CountingSpanExporter
from otel_ort.export.sdk_internals import batch_engine, queue_full, queued, shut_down_engine
from otel_ort.export.settings import Batching


class CountingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting every span it drops: those a full queue or its
    shutdown refuses, and those its shutdown's timeout leaves unexported. A full queue drops
    the new span, not the oldest (so the SDK neither warns nor counts it in its own metrics;
    ``DropCounter`` does)."""

    stream = ""
    queue_fix = ""
    """How to make the queue bigger, for the drop message."""

    def __init__(self, exporter: SpanExporter, drops: DropCounter, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._drops = drops
        self._engine = batch_engine(self)  # made once, by the SDK's constructor
        self._adding = threading.Lock()
        self._closed = False  # set under ``_adding``, before the SDK's own flag
        renew_locks_in_child(self, "_adding")

    def _queue(self, span: ReadableSpan) -> bool:
        """Queue ``span``, or count it dropped; whether it was queued.

        Spans are added under a lock and the SDK's export thread only takes from the queue,
        so a queue found full stays full until the add: each count is a span really dropped.
        The SDK sets its shutdown flag without a lock: ``_closed``, set under this one, keeps
        a span from being added between its check and the add, and lost uncounted.
        """
        with self._adding:
            if self._closed:
                reason, why = "already_shutdown", "the pipeline was shut down"
            elif queue_full(self._engine):
                reason, why = "queue_full", f"the export queue was full ({self.queue_fix})"
            else:
                super().on_end(span)
                return True
        self._drops.add(self.stream, reason, 1, why)  # not under the lock: it may log
        return False

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop taking spans, export those queued, count those the timeout left in the queue
        or in an export."""
        with self._adding:
            if self._closed:  # the provider's own shutdown, after Telemetry.shutdown's
                return
            self._closed = True
        engine = self._engine
        shut_down_engine(engine, timeout_millis)
        left = queued(engine)  # the export thread takes no more after a timeout
        exporter = self.span_exporter
        if isinstance(exporter, CountingSpanExporter):
            left += exporter.abandon_in_flight()
        if left:
            why = "the export did not finish by the shutdown's deadline"
            self._drops.add(self.stream, "shutdown_timeout", left, why)


class RequestSpanProcessor(CountingBatchProcessor):
    """The SDK's batch processor for the tracer's spans.

    Profile spans never reach it (:class:`otel_ort.export.delivery.SpanDelivery` skips it), so a
    profile burst cannot fill its queue.
    """

    takes_profile_spans = False
    stream = "requests"
    queue_fix = "raise OTEL_BSP_MAX_QUEUE_SIZE"

    def __init__(
        self, exporter: SpanExporter, drops: DropCounter, batching: Batching | None = None
    ) -> None:
        batching = batching or Batching.from_environment()
        super().__init__(
            exporter,
            drops,
            max_queue_size=batching.queue_size,
            max_export_batch_size=batching.batch_size,
            schedule_delay_millis=batching.delay_ms,
        )

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._queue(span)

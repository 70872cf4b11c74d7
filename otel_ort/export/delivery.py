"""Hand finished spans to a TracerProvider's span processors without losing them to a full queue.

A profile is a burst of thousands of spans at once; the SDK's ``BatchSpanProcessor`` holds
2048 by default and drops the oldest when a span comes to a full queue. Before each span goes
to a batch processor whose queue is 7/8 full, the queue is flushed through its exporter in
this thread (back-pressure: the caller waits, nothing is lost); the last eighth stays free for
the spans other threads end meanwhile. Only a processor that cannot take spans
at all (shut down) makes spans count as dropped. Processors with ``take_drafts``
(:class:`otel_ort.export.profile_export.ProfileExportProcessor`: ``configure()``'s and ``convert``'s
OTLP exports) take span drafts and encode them themselves, waiting for room in their own
queue, or take them already encoded (``take_encoded``: spans the conversion process
encoded); other processors get every span as a ``ReadableSpan``, except those marked
``takes_profile_spans = False`` (``otel_ort.configure()``'s processor for request spans,
whose queue profile bursts must not fill).

This reads the SDK's ``TracerProvider`` internals (its active span processor and, for batch
processors, the queue: :mod:`otel_ort.export.sdk_internals`): a provider that is not the SDK's
cannot take finished spans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_ort.export.sdk_internals import (
    active_span_processor,
    batch_engine,
    batch_queue,
    engine_shut_down,
    queue_capacity,
    span_processors,
)
from otel_ort.profiles.span_draft import SpanDraft, readable


class NotSdkTracerProvider(TypeError):
    """The tracer provider is not the SDK's: finished spans cannot be handed to it."""


class SpanDelivery:
    """Delivers finished spans to the span processors of one SDK TracerProvider."""

    def __init__(self, tracer_provider: object) -> None:
        active = active_span_processor(tracer_provider)
        if active is None:
            raise NotSdkTracerProvider(
                "profile spans need the OpenTelemetry SDK's TracerProvider "
                f"(opentelemetry.sdk.trace.TracerProvider), got {type(tracer_provider).__name__}"
            )
        self._active = active

    def _processors(self) -> Sequence[SpanProcessor]:
        # the multi-processor's list changes when the user adds a processor: read it each time
        return span_processors(self._active)

    def encodings(self) -> tuple[str, ...] | None:
        """The encodings in which every processor that takes profile spans takes them already
        encoded (``take_encoded``), by name; ``None`` when one needs them as span objects."""
        names: list[str] = []
        for processor in self._processors():
            if not getattr(processor, "takes_profile_spans", True):
                continue
            if getattr(processor, "take_encoded", None) is None:
                return None
            name = getattr(processor, "encoding_name", None)
            if not isinstance(name, str):
                return None
            if name not in names:
                names.append(name)
        return tuple(names)

    def deliver_encoded(
        self,
        resource: Resource,
        scope: InstrumentationScope | None,
        encoded: Mapping[str, Sequence[bytes]],
    ) -> int:
        """Give spans encoded in each of ``encodings()`` to the processors that take them so;
        return how many spans a processor dropped (as ``deliver_drafts``). A processor whose
        encoding is missing (one added since) drops them all."""
        dropped: set[int] = set()
        spans = max((len(one) for one in encoded.values()), default=0)
        for processor in self._processors():
            if not getattr(processor, "takes_profile_spans", True):
                continue
            take_encoded = getattr(processor, "take_encoded", None)
            name = getattr(processor, "encoding_name", None)
            if take_encoded is None or not isinstance(name, str) or name not in encoded:
                dropped.update(range(spans))
                continue
            dropped.update(take_encoded(resource, scope, encoded[name]))
        return len(dropped)

    def deliver_drafts(self, drafts: Sequence[SpanDraft]) -> int:
        """Give every span to every processor (otel-ort's encoding ones take the drafts, the
        others ``ReadableSpan``s, made once); return how many spans a processor dropped."""
        dropped: set[int] = set()  # indices: a span two processors dropped is one span lost
        readable_spans: list[ReadableSpan] | None = None
        for processor in self._processors():
            if not getattr(processor, "takes_profile_spans", True):
                continue
            take_drafts = getattr(processor, "take_drafts", None)  # encodes them itself
            if take_drafts is not None:
                dropped.update(take_drafts(drafts))
                continue
            if readable_spans is None:
                readable_spans = [readable(draft) for draft in drafts]
            dropped.update(_hand(processor, readable_spans))
        return len(dropped)


def _hand(processor: SpanProcessor, spans: Sequence[ReadableSpan]) -> set[int]:
    """Give ``spans`` to one processor, flushing a batch processor's queue when it is 7/8
    full; the indices of the spans it dropped."""
    batch = batch_engine(processor)
    queue = batch_queue(batch)
    capacity = queue_capacity(batch)
    if queue is None or capacity is None:
        for span in spans:
            processor.on_end(span)
        return set()
    dropped: set[int] = set()
    room = capacity - max(capacity // 8, 1)  # the rest: for other threads' spans
    for index, span in enumerate(spans):
        if len(queue) > room and not engine_shut_down(batch):
            processor.force_flush()  # exports what is queued, in this thread
        if engine_shut_down(batch) or len(queue) >= capacity:
            dropped.add(index)  # it would ignore the span, or drop the oldest
        else:
            processor.on_end(span)
    return dropped


def flushes(tracer_provider: object) -> list[Callable[..., object]]:
    """The ``force_flush`` of each span processor of an SDK provider, to be run together (the
    SDK's own flush runs them one after another, so against a collector that is down each
    waits out its export's retries in turn); else the provider's own, if it has one."""
    active = active_span_processor(tracer_provider)
    if active is not None:
        return [processor.force_flush for processor in span_processors(active)]
    flush = getattr(tracer_provider, "force_flush", None)
    return [flush] if callable(flush) else []

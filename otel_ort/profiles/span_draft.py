"""A finished span as plain data: what the profile span builder selects, before it becomes an
SDK ``ReadableSpan`` (for the user's span processors) or OTLP bytes
(:mod:`otel_ort.export.otlp_encoding`).

A draft costs a fraction of a ``ReadableSpan`` (no ``SpanContext`` per span and parent), and
both sinks give the same span: :func:`readable` and :func:`draft_of` are inverse.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    Link,
    SpanContext,
    SpanKind,
    Status,
    TraceFlags,
    TraceState,
)
from opentelemetry.util.types import AttributeValue

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status()


class SpanDraft:
    """One finished span. ``parent_id`` 0: a root span. ``attributes`` may be the SDK's
    ``BoundedAttributes`` (span limits applied), whose drops are ``dropped_attributes``."""

    __slots__ = (
        "attributes",
        "dropped_attributes",
        "dropped_events",
        "dropped_links",
        "encoded",
        "end",
        "events",
        "kind",
        "links",
        "name",
        "parent_id",
        "parent_remote",
        "resource",
        "scope",
        "span_id",
        "start",
        "status",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        trace_id: int,
        span_id: int,
        parent_id: int,
        name: str,
        start: int,
        end: int,
        attributes: Mapping[str, AttributeValue],
        resource: Resource,
        scope: InstrumentationScope | None,
        dropped_attributes: int = 0,
        links: Sequence[Link] = (),
        parent_remote: bool = False,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.parent_remote = parent_remote
        self.name = name
        self.start = start
        self.end = end
        self.attributes = attributes
        self.dropped_attributes = dropped_attributes
        self.links = links
        self.resource = resource
        self.scope = scope
        self.kind = SpanKind.INTERNAL
        self.status: Status = _UNSET
        self.events: Sequence[Event] = ()
        self.dropped_events = 0
        self.dropped_links = 0
        self.trace_state: TraceState = DEFAULT_TRACE_STATE
        self.encoded: tuple[bytes, bytes] | None = None
        """The protobuf encoding of the name and kind, and of the fields after the times
        (attributes to flags), once measured: the parts that do not depend on ids or times."""


class DeferredAttributes(Mapping[str, AttributeValue]):
    """A span's attributes made only when read: a node span encoded straight to protobuf
    needs its dict only for the user's span processors, OTLP/JSON or span limits."""

    __slots__ = ("_args", "_made", "_make")

    def __init__(self, make: Callable[..., dict[str, AttributeValue]], *args: Any) -> None:
        self._make = make
        self._args = args
        self._made: dict[str, AttributeValue] | None = None

    def resolved(self) -> dict[str, AttributeValue]:
        """The attributes, made on the first call."""
        made = self._made
        if made is None:
            made = self._made = self._make(*self._args)
            self._args = ()
        return made

    def __getitem__(self, key: str) -> AttributeValue:
        return self.resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.resolved())

    def __len__(self) -> int:
        return len(self.resolved())

    def items(self) -> ItemsView[str, AttributeValue]:
        return self.resolved().items()

    def __repr__(self) -> str:
        return repr(self.resolved())


def readable(draft: SpanDraft) -> ReadableSpan:
    """The draft as the SDK's finished span (span processors and exporters take these)."""
    context = SpanContext(draft.trace_id, draft.span_id, False, _SAMPLED, draft.trace_state)
    parent = None
    if draft.parent_id:
        parent = SpanContext(draft.trace_id, draft.parent_id, draft.parent_remote, _SAMPLED)
    attributes = draft.attributes
    if isinstance(attributes, DeferredAttributes):
        attributes = attributes.resolved()
    return ReadableSpan(
        name=draft.name,
        context=context,
        parent=parent,
        resource=draft.resource,
        attributes=attributes,
        events=draft.events,
        links=draft.links,
        kind=draft.kind,
        status=draft.status,
        start_time=draft.start,
        end_time=draft.end,
        instrumentation_scope=draft.scope,
    )


def draft_of(span: ReadableSpan) -> SpanDraft:
    """Any SDK finished span as a draft (for the OTLP encoders)."""
    context = span.context
    parent = span.parent
    draft = SpanDraft(
        context.trace_id if context is not None else 0,
        context.span_id if context is not None else 0,
        parent.span_id if parent is not None else 0,
        span.name,
        span.start_time or 0,
        span.end_time or 0,
        span.attributes or {},
        span.resource,
        span.instrumentation_scope,
        span.dropped_attributes,
        span.links,
        parent is not None and parent.is_remote,
    )
    draft.kind = span.kind
    draft.status = span.status
    draft.events = span.events
    draft.dropped_events = span.dropped_events
    draft.dropped_links = span.dropped_links
    if context is not None and context.trace_state is not None:
        draft.trace_state = context.trace_state
    return draft

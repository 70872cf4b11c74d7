"""Span drafts → OTLP bytes: protobuf (``ExportTraceServiceRequest``) and OTLP/JSON, written
field by field, with the bytes of each attribute cached per (key, value).

The output is what the SDK's ``encode_spans`` gives for the same finished spans (its field
choices included: an empty ``status`` message on every span, the ``flags`` field saying
whether the parent is remote, no trace state on links, attributes it cannot encode left
out), and the OTLP/JSON is what protobuf's ``MessageToDict`` gives with the ids in hex (the
OpenTelemetry Collector's ``file`` exporter's format). It costs a fraction: node attributes
repeat per op type, so most attributes are a cache hit, and no protobuf objects are made.

A span is encoded in three parts: its ids and times (known once the spans to send are
chosen) and the rest, whose size :meth:`ProtobufSpans.measure` gives exactly beforehand (for
the byte budget of a trace).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_ort._util.native import NATIVE_WANTED
from otel_ort.profiles.span_draft import SpanDraft

try:
    from otel_ort.export import _span_frame
except ImportError:  # not built at install: every span is framed in Python
    _span_frame = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _span_frame = None  # type: ignore[assignment]

_logger = logging.getLogger("otel_ort")

_INT64 = (-(2**63), 2**63 - 1)
_CACHE_LIMIT = 1 << 14
"""Cached values per attribute key, and keys, at most (then the cache starts again): values
that do not repeat do not pile up."""
_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
_FIXED32 = struct.Struct("<I")
_TIMES = struct.Struct("<BQBQ")
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_EMPTY_STATUS = b"\x7a\x00"
_FLAGS_TAG = b"\x85\x01"  # field 16, fixed32


class NotEncodable(ValueError):
    """An attribute value OTLP has no form for (the SDK's encoder logs and leaves it out)."""


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer below 2**64."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: ``tag`` (one byte: field number < 16) and its payload."""
    size = len(payload)
    return bytes((tag, size)) + payload if size < 0x80 else bytes((tag,)) + varint(size) + payload


def framed_size(size: int) -> int:
    """Bytes a message of ``size`` bytes takes as a repeated field (tag, length, itself)."""
    return 1 + len(varint(size)) + size


# -- attribute values ------------------------------------------------------------------


def any_value(value: Any) -> bytes:
    """An ``AnyValue`` message (oneof fields are written even when zero)."""
    encode = _PB_VALUES.get(type(value))
    if encode is not None:
        return encode(value)
    if value is None:
        return b""
    if isinstance(value, bytes):
        return field(0x3A, value)
    if isinstance(value, str | bool | int | float):  # subclasses, as the SDK's isinstance
        return any_value(_plain(value))
    if isinstance(value, Mapping):
        return field(0x32, b"".join(field(0x0A, key_value(str(k), v)) for k, v in value.items()))
    if isinstance(value, Sequence):
        return field(0x2A, b"".join(field(0x0A, any_value(item)) for item in value))
    raise NotEncodable(f"{type(value).__name__} is not an attribute type")


def _int64(value: int) -> int:
    if not _INT64[0] <= value <= _INT64[1]:
        raise NotEncodable(f"{value} is outside int64")
    return value


_PB_VALUES: dict[type, Callable[[Any], bytes]] = {
    str: lambda value: field(0x0A, value.encode("utf-8", "surrogatepass")),
    bool: lambda value: b"\x10\x01" if value else b"\x10\x00",
    int: lambda value: b"\x18" + varint(_int64(value) & 0xFFFFFFFFFFFFFFFF),
    float: lambda value: b"\x21" + _DOUBLE.pack(value),
}


def _plain(value: str | bool | int | float) -> str | bool | int | float:
    """A subclass's value as its base type's (an ``IntEnum`` as an ``int``)."""
    for kind in (bool, str, float, int):
        if isinstance(value, kind):
            return kind(value)
    return value


def key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message."""
    encoded_key = key.encode("utf-8", "surrogatepass")
    return (field(0x0A, encoded_key) if encoded_key else b"") + field(0x12, any_value(value))


def any_value_json(value: Any) -> Any:
    """An ``AnyValue`` as protobuf's JSON mapping writes it."""
    encode = _JSON_VALUES.get(type(value))
    if encode is not None:
        return encode(value)
    if value is None:
        return {}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, str | bool | int | float):
        return any_value_json(_plain(value))
    if isinstance(value, Mapping):
        entries = [key_value_json(str(k), v) for k, v in value.items()]
        return {"kvlistValue": {"values": entries} if entries else {}}
    if isinstance(value, Sequence):
        items = [any_value_json(item) for item in value]
        return {"arrayValue": {"values": items} if items else {}}
    raise NotEncodable(f"{type(value).__name__} is not an attribute type")


def _double_json(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


_JSON_VALUES: dict[type, Callable[[Any], Any]] = {
    str: lambda value: {"stringValue": value},
    bool: lambda value: {"boolValue": value},
    int: lambda value: {"intValue": str(_int64(value))},
    float: lambda value: {"doubleValue": _double_json(value)},
}


def key_value_json(key: str, value: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": key} if key else {}
    entry["value"] = any_value_json(value)
    return entry


def dumps(document: Any) -> bytes:
    """Compact JSON (orjson; the standard library's for what orjson refuses: lone surrogates)."""
    try:
        return orjson.dumps(document)
    except TypeError:
        return json.dumps(document, separators=(",", ":")).encode()


class _Attributes:
    """Each attribute's encoding, cached per key and value (``unique`` keys aside: a node's
    name, index, duration would fill the cache with entries never used again). An entry
    holds the value's type: ``True == 1 == 1.0``, encoded three ways."""

    def __init__(self, tag: int, unique: Iterable[str] = ()) -> None:
        self._tag = tag
        self._unique = frozenset(unique)
        self._caches: dict[str, dict[Any, tuple[type, bytes]]] = {}

    def encode(self, attributes: Mapping[str, Any], json_form: bool) -> list[bytes]:
        caches, out = self._caches, list[bytes]()
        append = out.append
        for key, value in attributes.items():
            cache = caches.get(key)
            if cache is None:
                if len(caches) >= _CACHE_LIMIT:
                    caches.clear()
                cache = caches[key] = _UNCACHED if key in self._unique else {}
            kind = type(value)
            if cache is not _UNCACHED and kind is not list and kind is not float:  # -0.0 == 0.0
                try:
                    hit = cache.get(value)
                except TypeError:  # unhashable: a tuple holding a list
                    hit = None
                if hit is not None and hit[0] is kind:
                    append(hit[1])
                    continue
            try:
                encoded = self._one(key, value, json_form)
            except NotEncodable as exc:
                _logger.warning("otel-ort: attribute %s not exported: %s", key, exc)
                continue
            cached = kind is not float and (kind is not tuple or _strings(value))
            if cache is not _UNCACHED and cached:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                with contextlib.suppress(TypeError):
                    cache[value] = (kind, encoded)
            append(encoded)
        return out

    def _one(self, key: str, value: Any, json_form: bool) -> bytes:
        if json_form:
            return dumps(key_value_json(key, value))
        return field(self._tag, key_value(key, value))


_UNCACHED: dict[Any, tuple[type, bytes]] = {}


def _strings(value: tuple[Any, ...]) -> bool:
    """A tuple of strings (an element of another type could equal another's: ``1 == True``)."""
    return all(type(item) is str for item in value)


def _attributes_pb(tag: int, attributes: Mapping[str, Any] | None) -> bytes:
    """Attributes of a resource, scope, event or link (rare: not cached)."""
    return b"".join(_Attributes(tag).encode(attributes or {}, json_form=False))


def _attributes_json(attributes: Mapping[str, Any] | None) -> list[Any]:
    return [orjson.loads(entry) for entry in _Attributes(0).encode(attributes or {}, True)]


# -- protobuf --------------------------------------------------------------------------


class ProtobufSpans:
    """OTLP protobuf: spans as ``ScopeSpans.spans`` entries, batches as requests."""

    def __init__(self, unique_keys: Iterable[str] = ()) -> None:
        self._attributes = _Attributes(0x4A, unique_keys)
        self._groups: dict[tuple[int, int], tuple[Any, Any, bytes, bytes]] = {}

    def measure(self, draft: SpanDraft) -> int:
        """The bytes the span takes in a request (tag and length included)."""
        state = len(_state_pb(draft))
        return self.measure_parts(
            self._parts(draft), draft.parent_id, draft.start, draft.end, state
        )

    @staticmethod
    def measure_parts(
        parts: tuple[bytes, bytes], parent_id: int, start: int, end: int, state_size: int = 0
    ) -> int:
        """``measure`` of a draft whose ``encoded`` is ``parts``, without the draft (a
        profile's node span has no trace state: ``state_size`` 0)."""
        size = len(parts[0]) + len(parts[1]) + 28  # trace id, span id: tag, length, bytes
        size += (10 if parent_id else 0) + state_size
        return framed_size(size + (9 if start else 0) + (9 if end else 0))

    def spans(self, drafts: list[SpanDraft]) -> list[bytes]:
        """:meth:`span` of each draft; in C (``_span_frame``) where it was built, for the
        drafts already measured."""
        if _span_frame is not None:
            return _span_frame.entries(drafts, self.span)
        return [self.span(draft) for draft in drafts]

    def span(self, draft: SpanDraft) -> bytes:
        """The span as a ``ScopeSpans.spans`` entry."""
        head, tail = self._parts(draft)
        ids = b"\x0a\x10" + draft.trace_id.to_bytes(16, "big")
        ids += b"\x12\x08" + draft.span_id.to_bytes(8, "big") + _state_pb(draft)
        if draft.parent_id:
            ids += b"\x22\x08" + draft.parent_id.to_bytes(8, "big")
        if draft.start and draft.end:
            times = _TIMES.pack(0x39, draft.start, 0x41, draft.end)
        else:
            times = (b"\x39" + _FIXED64.pack(draft.start) if draft.start else b"") + (
                b"\x41" + _FIXED64.pack(draft.end) if draft.end else b""
            )
        return field(0x12, b"".join((ids, head, times, tail)))

    def _parts(self, draft: SpanDraft) -> tuple[bytes, bytes]:
        parts = draft.encoded
        if parts is None:
            kind = draft.kind.value + 1  # the API's INTERNAL is 0, OTLP's 1
            head = field(0x2A, draft.name.encode("utf-8", "surrogatepass")) + bytes((0x30, kind))
            tail = [*self._attributes.encode(draft.attributes, json_form=False)]
            if draft.dropped_attributes:
                tail.append(b"\x50" + varint(draft.dropped_attributes))
            tail += [_event_pb(event) for event in draft.events]
            if draft.dropped_events:
                tail.append(b"\x60" + varint(draft.dropped_events))
            tail += [_link_pb(link) for link in draft.links]
            if draft.dropped_links:
                tail.append(b"\x70" + varint(draft.dropped_links))
            tail.append(_status_pb(draft))
            flags = _HAS_IS_REMOTE | (_IS_REMOTE if draft.parent_remote else 0)
            tail.append(_FLAGS_TAG + _FIXED32.pack(flags))
            parts = draft.encoded = (head, b"".join(tail))
        return parts

    def _group(self, resource: Resource, scope: InstrumentationScope | None) -> tuple[bytes, bytes]:
        """A ``ResourceSpans``' resource field and its ``ScopeSpans``' scope field (cached;
        the entry holds both objects, so their ids stay theirs)."""
        entry = self._groups.get((id(resource), id(scope)))
        if entry is None or entry[0] is not resource or entry[1] is not scope:
            if len(self._groups) > 64:
                self._groups.clear()
            scope_pb = b""
            if scope is not None:
                scope_pb = _string(0x0A, scope.name) + _string(0x12, scope.version or "")
                scope_pb += _attributes_pb(0x1A, scope.attributes)
            resource_pb = field(0x0A, _attributes_pb(0x0A, resource.attributes))
            entry = (resource, scope, resource_pb, field(0x0A, scope_pb))
            self._groups[id(resource), id(scope)] = entry
        return entry[2], entry[3]

    def request(
        self, groups: Sequence[tuple[Resource, InstrumentationScope | None, bytes]]
    ) -> bytes:
        """An ``ExportTraceServiceRequest`` of ``(resource, scope, spans)``, ``spans`` being
        :meth:`span` entries joined; one ``ResourceSpans`` per resource."""
        by_resource: dict[int, tuple[Resource, list[bytes]]] = {}
        for resource, scope, spans in groups:
            resource_pb, scope_pb = self._group(resource, scope)
            scope_url = _string(0x1A, (scope.schema_url if scope is not None else "") or "")
            scope_spans = field(0x12, scope_pb + spans + scope_url)
            by_resource.setdefault(id(resource), (resource, [resource_pb]))[1].append(scope_spans)
        return b"".join(
            field(0x0A, b"".join(parts) + _string(0x1A, resource.schema_url))
            for resource, parts in by_resource.values()
        )


def _string(tag: int, text: str) -> bytes:
    return field(tag, text.encode("utf-8", "surrogatepass")) if text else b""


def _state_pb(draft: SpanDraft) -> bytes:
    state = draft.trace_state
    return _string(0x1A, ",".join(f"{k}={v}" for k, v in state.items())) if state else b""


def _status_pb(draft: SpanDraft) -> bytes:
    status = draft.status
    code = status.status_code.value
    if not code and not status.description:
        return _EMPTY_STATUS
    return field(
        0x7A, _string(0x12, status.description or "") + (b"\x18" + varint(code) if code else b"")
    )


def _event_pb(event: Any) -> bytes:
    body = (b"\x09" + _FIXED64.pack(event.timestamp) if event.timestamp else b"") + _string(
        0x12, event.name
    )
    body += _attributes_pb(0x1A, event.attributes)
    if event.dropped_attributes:
        body += b"\x20" + varint(event.dropped_attributes)
    return field(0x5A, body)


def _link_pb(link: Any) -> bytes:
    context = link.context
    body = b"\x0a\x10" + context.trace_id.to_bytes(16, "big")
    body += b"\x12\x08" + context.span_id.to_bytes(8, "big")
    body += _attributes_pb(0x22, link.attributes)
    if link.dropped_attributes:
        body += b"\x28" + varint(link.dropped_attributes)
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)
    return field(0x6A, body + b"\x35" + _FIXED32.pack(flags))


# -- OTLP/JSON -------------------------------------------------------------------------


class JsonSpans:
    """OTLP/JSON: spans as JSON objects, batches as one ``ExportTraceServiceRequest`` line."""

    def __init__(self, unique_keys: Iterable[str] = ()) -> None:
        self._attributes = _Attributes(0, unique_keys)

    def spans(self, drafts: list[SpanDraft]) -> list[bytes]:
        """:meth:`span` of each draft."""
        return [self.span(draft) for draft in drafts]

    def span(self, draft: SpanDraft) -> bytes:
        """The span as one JSON object."""
        parts = [
            b'{"traceId":"%032x","spanId":"%016x"' % (draft.trace_id, draft.span_id),
        ]
        state = _state_pb(draft)
        if state:
            parts.append(b',"traceState":' + dumps(state[2:].decode()))
        if draft.parent_id:
            parts.append(b',"parentSpanId":"%016x"' % draft.parent_id)
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if draft.parent_remote else 0)
        parts.append(b',"flags":%d' % flags)
        if draft.name:
            parts.append(b',"name":' + dumps(draft.name))
        parts.append(b',"kind":%d' % (draft.kind.value + 1))
        if draft.start:
            parts.append(b',"startTimeUnixNano":"%d"' % draft.start)
        if draft.end:
            parts.append(b',"endTimeUnixNano":"%d"' % draft.end)
        attributes = self._attributes.encode(draft.attributes, json_form=True)
        if attributes:
            parts.append(b',"attributes":[' + b",".join(attributes) + b"]")
        parts.append(b"," + dumps(_json_rest(draft))[1:])
        return b"".join(parts)

    def request(
        self, groups: Sequence[tuple[Resource, InstrumentationScope | None, bytes]]
    ) -> bytes:
        """One ``ExportTraceServiceRequest`` line (``spans``: :meth:`span` objects joined
        with commas), newline included."""
        by_resource: dict[int, tuple[Resource, list[bytes]]] = {}
        for resource, scope, spans in groups:
            scope_json: dict[str, Any] = {}
            if scope is not None:
                scope_json = {"name": scope.name} if scope.name else {}
                if scope.version:
                    scope_json["version"] = scope.version
                attributes = _attributes_json(scope.attributes)
                if attributes:
                    scope_json["attributes"] = attributes
            opening = b'{"scope":' + dumps(scope_json) + b',"spans":['
            url = scope.schema_url if scope is not None else ""
            closing = b"]" + (b',"schemaUrl":' + dumps(url) if url else b"") + b"}"
            entry = by_resource.setdefault(id(resource), (resource, []))
            entry[1].append(opening + spans + closing)
        lines = []
        for resource, scope_spans in by_resource.values():
            attributes = _attributes_json(resource.attributes)
            resource_json = dumps({"attributes": attributes} if attributes else {})
            url = resource.schema_url
            lines.append(
                b'{"resource":' + resource_json + b',"scopeSpans":[' + b",".join(scope_spans)
                + b"]" + (b',"schemaUrl":' + dumps(url) if url else b"") + b"}"
            )  # fmt: skip
        return b'{"resourceSpans":[' + b",".join(lines) + b"]}\n"


def _json_rest(draft: SpanDraft) -> dict[str, Any]:
    """The span's JSON fields after its attributes."""
    rest: dict[str, Any] = {}
    if draft.dropped_attributes:
        rest["droppedAttributesCount"] = draft.dropped_attributes
    if draft.events:
        rest["events"] = [_event_json(event) for event in draft.events]
    if draft.dropped_events:
        rest["droppedEventsCount"] = draft.dropped_events
    if draft.links:
        rest["links"] = [_link_json(link) for link in draft.links]
    if draft.dropped_links:
        rest["droppedLinksCount"] = draft.dropped_links
    status: dict[str, Any] = {}
    if draft.status.description:
        status["message"] = draft.status.description
    if draft.status.status_code.value:
        status["code"] = draft.status.status_code.value
    rest["status"] = status
    return rest


def _event_json(event: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if event.timestamp:
        entry["timeUnixNano"] = str(event.timestamp)
    if event.name:
        entry["name"] = event.name
    attributes = _attributes_json(event.attributes)
    if attributes:
        entry["attributes"] = attributes
    if event.dropped_attributes:
        entry["droppedAttributesCount"] = event.dropped_attributes
    return entry


def _link_json(link: Any) -> dict[str, Any]:
    context = link.context
    entry: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
    }
    attributes = _attributes_json(link.attributes)
    if attributes:
        entry["attributes"] = attributes
    if link.dropped_attributes:
        entry["droppedAttributesCount"] = link.dropped_attributes
    entry["flags"] = _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)
    return entry

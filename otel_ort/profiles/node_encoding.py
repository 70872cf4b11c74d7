"""A node span's attributes written straight to OTLP protobuf from its ``Node`` event's args,
each attribute's bytes cached per raw value: what :func:`node_attributes` gives, encoded as
:class:`~otel_ort.export.otlp_encoding.ProtobufSpans` encodes it, without the dict.

A profile's args repeat: op types, providers, sizes, ``mem_*`` statistics and shapes per node,
and a model's node names and indexes from one run to the next. A repeated arg costs a dict
look-up here. Caches are keyed per attribute by the raw value, of one exact type only, since
``True == 1 == 1.0``: ORT's strings (``"1024"``), a node's thread id, a shape list by its
orjson text (the same text is the same JSON value; text holding ``null``, which ``NaN``,
``Infinity`` and ``None`` all become, is not cached). Other values (a file not ORT's) are
encoded each time. Args read by type (:class:`~otel_ort.profiles.ort_events.RawArgs`) are
cached by their raw JSON text instead, parsed only when not cached; a thread statistics'
summary too. Each cache holds at most ``_CACHE_LIMIT`` entries, then starts again (one of
small integers at most ``_SMALL``).

Values that change from run to run are cached only when small (below ``_SMALL``): a node's
duration (when an ``int``), its main thread's run and wait times and its pool's task count,
perf counts and their splits by thread (the counted threads' ids always). Larger ones rarely
repeat; cached, they would fill the caches with entries never used again, whose objects keep
Python's memory pools from being returned.

The usual case runs in C (``_node_parts``, built when a C compiler is there at install):
it reads these caches, never fills them, and parses thread statistics itself; a node with
anything else (a value not cached yet, a form it does not know) is encoded here, so both
give the same bytes. Without the C part, every node is encoded here.

A node whose attributes could collide (both ``node_index`` and ``graph_index``, or extra
attributes named like a node's) or that span limits would cut is left to the dict path
(``None``).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec
import orjson
from msgspec import Raw
from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort._util.native import NATIVE_WANTED
from otel_ort._util.text_limits import clip
from otel_ort.export.otlp_encoding import (
    NotEncodable,
    ProtobufSpans,
    any_value,
    field,
    key_value,
    varint,
)
from otel_ort.profiles.node_attributes import (
    INDEX_ARGS,
    INT64,
    SHAPE_ARGS,
    THREAD_STATS_ARG,
    int_arg_name,
    int_of,
    int_value,
    shapes_of,
)
from otel_ort.profiles.ort_events import RawArgs, ThreadStats, decode_stats, raw_value
from otel_ort.profiles.records import NodeRecord
from otel_ort.profiles.span_draft import DeferredAttributes, SpanDraft

try:
    from otel_ort.profiles import _node_parts
except ImportError:  # not built at install: every node is encoded in Python
    _node_parts = None  # type: ignore[assignment]
if not NATIVE_WANTED:  # OTEL_ORT_NATIVE=off
    _node_parts = None  # type: ignore[assignment]

_logger = logging.getLogger("otel_ort")

_CACHE_LIMIT = 1 << 14
_STATS_LIMIT = 1 << 6
"""Thread statistics' texts mostly differ from run to run (they hold times): their cache
keeps the ones that repeat within a run (a node that used no pool thread) in tens of KB."""
_SMALL = 1 << 12
"""Run-varying integers below this are cached (they repeat: short nodes' durations, zero
counts); larger ones are encoded each time."""
_V = TypeVar("_V")
_DOUBLE = struct.Struct("<d")
_NODE_PREFIX = "onnxruntime.node."
"""Every node attribute's name starts so, but ``thread.id``'s."""
_INT, _SHAPE, _THREADS, _IGNORED = range(4)
_Handler = tuple[int, bytes, dict[Any, bytes]]
"""How an arg is encoded: its kind, its attribute's key field, the cache of its values."""
_UNSEEN: dict[bytes, bytes] = {}
"""An arg name the raw texts' caches have not met yet."""


_ATTRIBUTE_TAG = 0x4A  # Span.attributes: field 9, length-delimited
_INT_VALUE = b"\x18"  # AnyValue.int_value, a varint of the 64-bit two's complement
_UINT64_MASK = 0xFFFFFFFFFFFFFFFF


def _plain_parts() -> tuple[bytes, bytes]:
    """What ``ProtobufSpans`` writes around an internal span's name and attributes when it
    has nothing else (unset status, no events or links, a local parent): the kind after the
    name, and the fields after the attributes. Taken from the encoder itself."""
    draft = SpanDraft(1, 1, 1, "", 1, 1, {}, Resource.get_empty(), None)
    ProtobufSpans().measure(draft)
    assert draft.encoded is not None
    head, tail = draft.encoded
    return head[2:], tail  # the head: the empty name's field (2 bytes), then the kind


_KIND, _END = _plain_parts()

DraftKit = tuple[type[SpanDraft], type[DeferredAttributes], Callable[..., Any], Resource, Any, int]
"""What a node span's draft is made with: its type, the deferred attributes' type and what
makes them, the resource, the scope, the longest name (``MAX_TEXT``)."""


def span_attribute(key: str, value: Any) -> bytes:
    """One ``Span.attributes`` entry as ``ProtobufSpans`` writes it; ``NotEncodable`` for a
    value OTLP has no form for."""
    return field(_ATTRIBUTE_TAG, key_value(key, value))


def attribute_key(key: str) -> bytes:
    """``KeyValue.key``'s field, as ``key_value`` writes it."""
    encoded_key = key.encode("utf-8", "surrogatepass")
    return field(0x0A, encoded_key) if encoded_key else b""


def attribute_entry(key_field: bytes, value: bytes) -> bytes:
    """``span_attribute(key, v) == attribute_entry(attribute_key(key), any_value(v))``."""
    return field(_ATTRIBUTE_TAG, key_field + field(0x12, value))


def _int_entry(key_field: bytes, number: int) -> bytes:
    """An ``int64`` attribute (``number`` within int64)."""
    return attribute_entry(key_field, _INT_VALUE + varint(number & _UINT64_MASK))


class NodeEncoder:
    """Encodes node spans' attributes for one span builder (its caches last as long)."""

    def __init__(self, native: bool = True) -> None:
        """``native``: the C part encodes the nodes it can (when it was built)."""
        self._args: dict[str, _Handler] = {}
        self._names: dict[str, tuple[bytes, bytes]] = {}
        self._fixed = {
            key: (attribute_key(key), dict[Any, bytes]())
            for key in (
                semconv.NODE_OP_TYPE,
                semconv.NODE_PROVIDER,
                semconv.NODE_DURATION_US,
                semconv.THREAD_ID,
                semconv.NODE_THREAD_POOL,
                semconv.NODE_MAIN_THREAD_RUN_US,
                semconv.NODE_MAIN_THREAD_WAIT_US,
                semconv.NODE_THREADS_USED,
                semconv.NODE_THREAD_TASKS,
            )
        }
        self._name_key = attribute_key(semconv.NODE_NAME)
        self._extra: dict[str, tuple[bytes, dict[int | tuple[int, ...], bytes]]] = {}
        self._stats: dict[bytes, tuple[bytes, ...]] = {}
        self._raw: dict[str, dict[bytes, bytes] | None] = {}
        """Per arg name, its attributes by raw text (``None``: the arg is no attribute)."""
        self._native = self._native_encoder() if native and _node_parts is not None else None

    @property
    def native(self) -> bool:
        """Whether the C part encodes the nodes it can."""
        return self._native is not None

    def draft(
        self,
        node: NodeRecord,
        extra: Mapping[str, AttributeValue] | None,
        max_attributes: int | None,
        place: tuple[int, int, int],
        kit: DraftKit,
    ) -> tuple[SpanDraft, int] | None:
        """A node span's draft without kernels, its attributes encoded, and its size, made in
        C (``SpanBuilder._measured``'s usual case); ``None`` when that is not the C part's.
        ``place``: the profile's start (ns), the trace id, the parent span id."""
        if self._native is None:
            return None
        made = self._native.draft(node, extra, max_attributes, *place, kit)
        return None if made is NotImplemented else made

    def _native_encoder(self) -> _node_parts.Encoder:
        """The C part, reading this encoder's caches."""
        fixed = self._fixed
        return _node_parts.Encoder(
            names=self._names,
            op_types=fixed[semconv.NODE_OP_TYPE][1],
            providers=fixed[semconv.NODE_PROVIDER][1],
            pools=fixed[semconv.NODE_THREAD_POOL][1],
            raw=self._raw,
            extra=self._extra,
            duration_key=fixed[semconv.NODE_DURATION_US][0],
            thread_id_key=fixed[semconv.THREAD_ID][0],
            run_key=fixed[semconv.NODE_MAIN_THREAD_RUN_US][0],
            wait_key=fixed[semconv.NODE_MAIN_THREAD_WAIT_US][0],
            used_key=fixed[semconv.NODE_THREADS_USED][0],
            tasks_key=fixed[semconv.NODE_THREAD_TASKS][0],
            end=_END,
            raw_args_type=RawArgs,
            stats_arg=THREAD_STATS_ARG,
            handlers=self._args,
            int_kind=_INT,
        )

    def parts(
        self,
        node: NodeRecord,
        extra: Mapping[str, AttributeValue] | None,
        max_attributes: int | None,
    ) -> tuple[bytes, bytes] | None:
        """The node span's ``SpanDraft.encoded`` (name and kind; attributes to flags), its
        attributes being ``node_attributes(node, extra)``; ``None`` when the dict path must
        make them (see the module's docstring)."""
        if self._native is not None:
            made = self._native.parts(node, extra, max_attributes)
            if made is not NotImplemented:
                return made
        args = node.args
        if INDEX_ARGS[0] in args and INDEX_ARGS[1] in args:
            return None
        named = self._names.get(node.name) if type(node.name) is str else None
        if named is None:
            named = self._named(node.name)
        pieces = [named[1]]
        self._record_pieces(node, pieces.append)
        if type(args) is RawArgs:
            self._raw_arg_pieces(args.raw, pieces.append)
        else:
            self._arg_pieces(args, pieces.append)
        skipped = self._extra_pieces(extra, pieces.append) if extra else 0
        if skipped < 0:
            return None
        if max_attributes is not None and len(pieces) + skipped > max_attributes:
            return None
        pieces.append(_END)
        return named[0], b"".join(pieces)

    def _record_pieces(self, node: NodeRecord, append: Callable[[bytes], None]) -> None:
        """Op type, provider, duration, thread id."""
        fixed = self._fixed
        append(self._cached_str(fixed[semconv.NODE_OP_TYPE], node.op_type))
        append(self._cached_str(fixed[semconv.NODE_PROVIDER], node.provider))
        key_field, cache = fixed[semconv.NODE_DURATION_US]
        dur = node.dur
        small = type(dur) is int and 0 <= dur < _SMALL  # not floats: -0.0 == 0
        piece = cache.get(dur) if small else None
        if piece is None:
            piece = attribute_entry(key_field, b"\x21" + _DOUBLE.pack(float(dur)))
            if small:
                cache[dur] = piece
        append(piece)
        tid = int_value(node.tid)
        if tid is not None:
            append(self._cached_int(fixed[semconv.THREAD_ID], tid))

    def _arg_pieces(self, args: Mapping[str, Any], append: Callable[[bytes], None]) -> None:
        """The args' attributes, in the args' order."""
        handlers = self._args
        for key, value in args.items():
            handler = handlers.get(key)
            if handler is None:
                handler = self._handler(key)
            kind = handler[0]
            if kind == _INT:
                piece = handler[2].get(value) if type(value) is str else None
                if piece is None:
                    number = int_of(value)
                    piece = b"" if number is None else _int_entry(handler[1], number)
                    if type(value) is str:
                        _put(handler[2], value, piece)
                if piece:
                    append(piece)
            elif kind == _SHAPE:
                piece = self._shapes(handler, value)
                if piece:
                    append(piece)
            elif kind == _THREADS and isinstance(value, dict):
                self._thread_summary(value, append)

    def _raw_arg_pieces(self, raw_args: dict[str, Raw], append: Callable[[bytes], None]) -> None:
        """``_arg_pieces`` for args kept as raw JSON text (a file read by type): each
        attribute cached by its arg's text (the same text is the same JSON value), parsed
        only when not cached; thread statistics' summaries too."""
        by_key = self._raw
        for key, raw in raw_args.items():
            if key == THREAD_STATS_ARG:
                self._raw_stats(raw, append)
                continue
            texts = by_key.get(key, _UNSEEN)
            if texts is None:  # an arg that is no attribute
                continue
            if texts is _UNSEEN:
                texts = None if self._handler(key)[0] == _IGNORED else {}
                _put(by_key, key, texts)
                if texts is None:
                    continue
            text = bytes(raw)
            piece = texts.get(text)
            if piece is None:
                piece = _put(texts, text, self._raw_piece(key, raw))
            if piece:
                append(piece)

    def _raw_piece(self, key: str, raw: Raw) -> bytes:
        """The attribute of an int or shape arg (``b""``: none), parsed from its text."""
        kind, key_field, _ = self._args.get(key) or self._handler(key)
        value = raw_value(raw)
        if kind == _INT:
            number = int_of(value)
            return b"" if number is None else _int_entry(key_field, number)
        shapes = shapes_of(value)
        return attribute_entry(key_field, any_value(shapes)) if shapes else b""

    def _raw_stats(self, raw: Raw, append: Callable[[bytes], None]) -> None:
        """A thread statistics' summary, cached by its text."""
        text = bytes(raw)
        summary = self._stats.get(text)
        if summary is None:
            made: list[bytes] = []
            try:  # ORT's shape, decoded by type: what the summary reads, no more
                self._typed_summary(decode_stats(text), made.append)
            except msgspec.DecodeError:  # another shape: read in full (ValidationError too)
                made.clear()
                value = raw_value(raw)
                if isinstance(value, dict):
                    self._thread_summary(value, made.append)
            summary = _put(self._stats, text, tuple(made), _STATS_LIMIT)
        for each in summary:
            append(each)

    def _extra_pieces(
        self, extra: Mapping[str, AttributeValue], append: Callable[[bytes], None]
    ) -> int:
        """The extra attributes after the node's; how many OTLP has no form for, or -1 when
        one is named like a node attribute (it would replace it, in its place). A key is
        checked once: then it has an entry in ``_extra``."""
        skipped = 0
        caches = self._extra
        for key, value in extra.items():
            cached = caches.get(key)
            if cached is None:
                if key.startswith(_NODE_PREFIX) or key == semconv.THREAD_ID:
                    return -1
                cached = _put(caches, key, (attribute_key(key), {}))
            piece: bytes | None = None
            if type(value) is int:  # a perf count
                small = 0 <= value < _SMALL
                piece = cached[1].get(value) if small else None
                if piece is None:
                    piece = _count_entry(cached[0], value)
                    if small:
                        cached[1][value] = piece
            elif type(value) is list:  # its split by thread
                known = _ints(value)
                if known is not None:
                    repeats = key == semconv.PERF_THREAD_IDS or _all_small(known)
                    piece = cached[1].get(known) if repeats else None
                    if piece is None:
                        piece = _int_attribute(cached[0], known)
                        if repeats:
                            _put(cached[1], known, piece)
            if piece:  # else out of int64, or not an int: the general encoder
                append(piece)
                continue
            try:
                append(span_attribute(key, value))
            except NotEncodable as exc:  # as ProtobufSpans leaves it out
                _logger.warning("otel-ort: attribute %s not exported: %s", key, exc)
                skipped += 1
        return skipped

    def _named(self, name: str) -> tuple[bytes, bytes]:
        """The span's name and kind fields and its ``onnxruntime.node.name`` entry."""
        clipped = clip(name)
        head = field(0x2A, clipped.encode("utf-8", "surrogatepass")) + _KIND
        named = head, attribute_entry(self._name_key, any_value(clipped))
        return _put(self._names, name, named) if type(name) is str else named

    def _handler(self, key: str) -> _Handler:
        name = int_arg_name(key)
        if name is not None:
            handler: _Handler = (_INT, attribute_key(name), {})
        elif key in SHAPE_ARGS:
            handler = (_SHAPE, attribute_key(SHAPE_ARGS[key]), {})
        elif key == THREAD_STATS_ARG:
            handler = (_THREADS, b"", {})
        else:
            handler = (_IGNORED, b"", {})
        return _put(self._args, key, handler)

    def _shapes(self, handler: _Handler, value: Any) -> bytes:
        cache = handler[2]
        try:
            text: bytes | None = orjson.dumps(value)
        except TypeError:  # an integer over 64 bits, a type not JSON's
            text = None
        if text is not None and b"null" not in text:
            piece = cache.get(text)
            if piece is not None:
                return piece
        shapes = shapes_of(value)
        piece = attribute_entry(handler[1], any_value(shapes)) if shapes else b""
        if text is not None and b"null" not in text:
            _put(cache, text, piece)
        return piece

    def _thread_summary(self, stats: dict[str, Any], append: Callable[[bytes], None]) -> None:
        """:func:`~otel_ort.profiles.node_attributes.thread_summary`, encoded."""
        fixed = self._fixed
        main = stats.get("main_thread")
        if isinstance(main, dict):
            pool = main.get("thread_pool_name")
            if isinstance(pool, str):
                append(self._cached_str(fixed[semconv.NODE_THREAD_POOL], pool))
            number = int_value(main.get("Run"))
            if number is not None:
                append(self._varying_int(fixed[semconv.NODE_MAIN_THREAD_RUN_US], number))
            number = int_value(main.get("Wait"))
            if number is not None:
                append(self._varying_int(fixed[semconv.NODE_MAIN_THREAD_WAIT_US], number))
        sub_threads = stats.get("sub_threads")
        if isinstance(sub_threads, dict):
            used = tasks = 0
            for sub in sub_threads.values():
                if isinstance(sub, dict):
                    runs = int_value(sub.get("num_run")) or 0
                    tasks += runs
                    used += runs > 0
            append(self._cached_int(fixed[semconv.NODE_THREADS_USED], 1 + used))
            append(self._varying_int(fixed[semconv.NODE_THREAD_TASKS], min(tasks, INT64[1])))

    def _typed_summary(self, stats: ThreadStats, append: Callable[[bytes], None]) -> None:
        """``_thread_summary`` of statistics decoded by type."""
        fixed = self._fixed
        main = stats.main_thread
        if main is not None:
            if main.thread_pool_name is not None:
                append(self._cached_str(fixed[semconv.NODE_THREAD_POOL], main.thread_pool_name))
            number = int_value(main.Run)
            if number is not None:
                append(self._varying_int(fixed[semconv.NODE_MAIN_THREAD_RUN_US], number))
            number = int_value(main.Wait)
            if number is not None:
                append(self._varying_int(fixed[semconv.NODE_MAIN_THREAD_WAIT_US], number))
        if stats.sub_threads is not None:
            used = tasks = 0
            for sub in stats.sub_threads.values():
                runs = int_value(sub.num_run) or 0
                tasks += runs
                used += runs > 0
            append(self._cached_int(fixed[semconv.NODE_THREADS_USED], 1 + used))
            append(self._varying_int(fixed[semconv.NODE_THREAD_TASKS], min(tasks, INT64[1])))

    @staticmethod
    def _cached_str(fixed: tuple[bytes, dict[Any, bytes]], text: str) -> bytes:
        """A string attribute (clipped) of a ``str`` value."""
        key_field, cache = fixed
        piece = cache.get(text) if type(text) is str else None
        if piece is None:
            piece = attribute_entry(key_field, any_value(clip(text)))
            if type(text) is str:
                _put(cache, text, piece)
        return piece

    @staticmethod
    def _varying_int(fixed: tuple[bytes, dict[Any, bytes]], number: int) -> bytes:
        """An int64 attribute whose values change from run to run: cached below ``_SMALL``."""
        if 0 <= number < _SMALL:
            return NodeEncoder._cached_int(fixed, number)
        return _count_entry(fixed[0], number)

    @staticmethod
    def _cached_int(fixed: tuple[bytes, dict[Any, bytes]], number: int) -> bytes:
        """An int64 attribute of an ``int`` within int64."""
        key_field, cache = fixed
        piece = cache.get(number)
        if piece is None:
            piece = _put(cache, number, _int_entry(key_field, number))
        return piece


def _all_small(values: tuple[int, ...]) -> bool:
    """Every value is below ``_SMALL`` (and not negative): a split worth caching (zero counts
    repeat from node to node; CPU times in ns rarely do)."""
    for value in values:  # noqa: SIM110 (a loop: twice as fast as all() over a generator)
        if not 0 <= value < _SMALL:
            return False
    return True


def _count_entry(key_field: bytes, number: int) -> bytes:
    """``_int_attribute`` of one ``int``, written directly when it is not negative and the
    key short (a perf count): the same bytes, without the nested ``field`` calls."""
    if number < 0 or number > INT64[1] or len(key_field) > 96:
        return _int_attribute(key_field, number)
    value = varint(number)
    size = len(value)
    return b"".join(
        (
            b"\x4a",
            bytes((len(key_field) + 3 + size,)),
            key_field,
            bytes((0x12, 1 + size, 0x18)),
            value,
        )
    )


def _ints(values: list[Any]) -> tuple[int, ...] | None:
    """``values`` as a tuple if each is an ``int`` (not a ``bool``, which equals one)."""
    for value in values:
        if type(value) is not int:
            return None
    return tuple(values)


def _int_attribute(key_field: bytes, value: int | tuple[int, ...]) -> bytes:
    """An int64 attribute, or an array of int64 values; ``b""`` for one outside int64
    (then the general encoder says why it is left out)."""
    if isinstance(value, int):
        return _int_entry(key_field, value) if INT64[0] <= value <= INT64[1] else b""
    if not all(INT64[0] <= number <= INT64[1] for number in value):
        return b""
    items = b"".join(field(0x0A, _INT_VALUE + varint(number & _UINT64_MASK)) for number in value)
    return attribute_entry(key_field, field(0x2A, items))


def _put(cache: dict[Any, Any], key: Any, value: _V, limit: int = _CACHE_LIMIT) -> _V:
    """``cache[key] = value``, the cache started again when full; returns ``value``."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value

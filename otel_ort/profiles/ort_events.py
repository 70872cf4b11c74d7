"""ORT's own profile files decoded by type: the eight fields ORT writes per event, the args
object kept as its raw JSON text until it is read.

A file ORT wrote is a bare array of events with exactly ``cat``, ``pid``, ``tid``, ``dur``,
``ts``, ``ph``, ``name`` and ``args``. Decoded into typed events (msgspec), it is read in
about a fifth of the time of a full parse, and its args cost nothing until they are read:
the C parts read the args object's text directly, and the Python code splits it into each
arg's raw text when it first needs them (the node encoder keys its caches by each arg's
text, so a value seen before is never parsed). The events are not tracked by the garbage
collector (they hold no cycles).

Any other file, or one with anything unusual (another field, a missing one, another type in
one of the seven fields other than ``args``,
invalid UTF-8, a ``\\ud800``-style escape, ``NaN``, a file cut short), is not decoded here
(``None``): the general reader takes it, with its own rules for each of those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import orjson


class OrtEvent(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """One event as ORT writes it (the fields in ORT's order, which encoding keeps)."""

    cat: str
    pid: int
    tid: int
    dur: int | float
    ts: int | float
    ph: str
    name: str
    args: msgspec.Raw
    """The args object's JSON text (any JSON value: what is not an object has no args)."""


class MainThreadStats(msgspec.Struct, gc=False):
    """What the node summary reads of ``thread_scheduling_stats.main_thread``."""

    thread_pool_name: str | None = None
    Run: int | str | None = None
    Wait: int | str | None = None


class SubThreadStats(msgspec.Struct, gc=False):
    """What the node summary reads of one of ``thread_scheduling_stats.sub_threads``."""

    num_run: int | str | None = None


class ThreadStats(msgspec.Struct, gc=False):
    """What the node summary reads of a node's ``thread_scheduling_stats`` arg, in ORT's
    shape (other fields are passed over; any other type is a ``msgspec.ValidationError``)."""

    main_thread: MainThreadStats | None = None
    sub_threads: dict[str, SubThreadStats] | None = None


_STATS_DECODER = msgspec.json.Decoder(ThreadStats)


def decode_stats(text: bytes) -> ThreadStats:
    """A ``thread_scheduling_stats`` arg's JSON text, decoded by type."""
    return _STATS_DECODER.decode(text)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DECODER = msgspec.json.Decoder(list[OrtEvent])
_ENCODER = msgspec.json.Encoder()


def decode_events(data: bytes) -> list[OrtEvent] | None:
    """The events of a file in exactly ORT's shape; ``None`` for any other (see the module's
    docstring)."""
    if not data[:64].lstrip().startswith(b"["):
        return None
    if b"\\" in data and _SURROGATE_ESCAPE.search(data):  # one byte's search: fast
        return None
    if not data.isascii():  # msgspec checks UTF-8 only in the fields it decodes, not in args
        try:
            data.decode("utf-8")  # strict: no invalid bytes, no encoded surrogates
        except UnicodeDecodeError:
            return None
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError is a DecodeError
        return None


def encode(document: Any) -> bytes:
    """JSON of ``document``, which may hold :class:`OrtEvent` s and ``msgspec.Raw`` values
    (written as they were read)."""
    return _ENCODER.encode(document)


def as_dict(event: OrtEvent) -> dict[str, Any]:
    """The event as the general reader gives it."""
    fields = {field: getattr(event, field) for field in event.__struct_fields__}
    fields["args"] = raw_value(event.args)
    return fields


_ARGS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


def split_args(text: msgspec.Raw) -> dict[str, msgspec.Raw] | None:
    """Each arg's raw text (a repeated name: its last value, where it first came, as the
    general reader's parse gives it); ``None`` when the args are no object."""
    try:
        return _ARGS_DECODER.decode(text)
    except msgspec.DecodeError:  # a list, a string...: no args (the general reader's {})
        return None


def raw_value(raw: msgspec.Raw) -> Any:
    """An arg's value, as the general reader's parse of the whole file gives it (the standard
    library's where orjson refuses the text: a number such as ``1e400``)."""
    try:
        return orjson.loads(memoryview(raw))
    except orjson.JSONDecodeError:
        return json.loads(bytes(raw))


class RawArgs(Mapping[str, Any]):
    """An event's args: ``text``, the args object's JSON text; ``raw``, each arg's text (split
    when first asked for); parsed when first read as a mapping."""

    __slots__ = ("_parsed", "_raw", "text")

    def __init__(self, text: msgspec.Raw) -> None:
        self.text = text
        self._raw: dict[str, msgspec.Raw] | None = None
        self._parsed: dict[str, Any] | None = None

    @property
    def raw(self) -> dict[str, msgspec.Raw]:
        """Each arg's raw JSON text."""
        raw = self._raw
        if raw is None:
            raw = self._raw = split_args(self.text) or {}
        return raw

    def parsed(self) -> dict[str, Any]:
        """Every arg's value."""
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = {key: raw_value(raw) for key, raw in self.raw.items()}
        return parsed

    def __getitem__(self, key: str) -> Any:
        return self.parsed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RawArgs):
            other = other.parsed()
        return self.parsed() == other

    __hash__ = None  # type: ignore[assignment]  # a mapping, as dict

    def __repr__(self) -> str:
        return repr(self.parsed())

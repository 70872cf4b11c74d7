"""Turn the perf events a user asks for into ``perf_event_attr`` parameters.

A selection is a comma-separated string (``"task-clock,cycles=cyc"``), a sequence of such strings,
or the path of a JSON file in the format of the per-layer perf-counter fork of ONNX Runtime: an
object mapping event name to alias. Each event is one of

* a perf generic name: ``cycles``, ``task-clock``, ``page-faults``, ``L1-dcache-load-misses``...;
* a raw PMU event ``rNNNN`` (hexadecimal config, ``PERF_TYPE_RAW``);
* a libpfm4 name with a ``::`` (``perf::PAGE-FAULTS``, ``skl::INST_RETIRED:ANY_P``), when libpfm4
  is installed.

``name=alias`` renames: spans carry ``perf.<alias>``. Malformed configuration raises
:class:`PerfConfigError`; events this machine cannot name come back as :class:`Unavailable`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from otel_ort.perf import pfm

TIME_ALIAS_DEFAULT = "task-clock"
"""The alias of the on-CPU time, counted on every thread (as task-clock) when not named."""

Kind = Literal["time", "sparse", "dense"]
"""How a counter is attributed to nodes: ``time`` is the on-CPU clock itself, ``sparse`` counts
rare discrete events (sampled with period 1), ``dense`` is interpolated in on-CPU time."""

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4

_HARDWARE = {
    "cycles": 0, "cpu-cycles": 0, "instructions": 1, "cache-references": 2, "cache-misses": 3,
    "branches": 4, "branch-instructions": 4, "branch-misses": 5, "bus-cycles": 6,
    "stalled-cycles-frontend": 7, "stalled-cycles-backend": 8, "ref-cycles": 9,
}  # fmt: skip
_SOFTWARE = {
    "cpu-clock": 0, "task-clock": 1, "page-faults": 2, "faults": 2, "context-switches": 3,
    "cs": 3, "cpu-migrations": 4, "migrations": 4, "minor-faults": 5, "major-faults": 6,
}  # fmt: skip
_CACHES = {"L1-dcache": 0, "L1-icache": 1, "LLC": 2, "dTLB": 3, "iTLB": 4, "branch": 5, "node": 6}
_CACHE_OPS = {"load": ("loads", 0), "store": ("stores", 1), "prefetch": ("prefetches", 2)}


def _generic_events() -> dict[str, tuple[int, int]]:
    events = {name: (PERF_TYPE_HARDWARE, config) for name, config in _HARDWARE.items()}
    events.update({name: (PERF_TYPE_SOFTWARE, config) for name, config in _SOFTWARE.items()})
    for cache, cache_id in _CACHES.items():
        for op, (plural, op_id) in _CACHE_OPS.items():
            # config = cache id | op << 8 | result << 16 (result 0 = access, 1 = miss)
            events[f"{cache}-{plural}"] = (PERF_TYPE_HW_CACHE, cache_id | op_id << 8)
            events[f"{cache}-{op}-misses"] = (PERF_TYPE_HW_CACHE, cache_id | op_id << 8 | 1 << 16)
    return events


GENERIC_EVENTS: dict[str, tuple[int, int]] = _generic_events()
"""perf's generic event names -> (``perf_event_attr.type``, ``config``)."""
_BY_LOWER = {name.lower(): name for name in GENERIC_EVENTS}
_GENERIC_NAME: dict[tuple[int, int], str] = {}  # the first (canonical) name of each encoding
for _name, _encoding in GENERIC_EVENTS.items():
    _GENERIC_NAME.setdefault(_encoding, _name)

_ALIAS_RE = re.compile(r"[A-Za-z0-9_.-]+")
_RAW_RE = re.compile(r"r([0-9a-fA-F]+)")
_RAW_LIKE_RE = re.compile(r"r(?=[A-Za-z]*[0-9])[0-9A-Za-z]+")  # r + letters/digits, one digit
# libpfm4 modifiers look like an alias: "perf::CYCLES:u=1" is not "perf::CYCLES:u" renamed "1"
_MODIFIER_NAME_RE = re.compile(r".*::.*:\w+")
_MODIFIER_VALUE_RE = re.compile(r"\d+|0x[0-9a-fA-F]+")
_JSON_FORMAT = (
    'a JSON object mapping event name to alias, e.g. {"perf::PERF_COUNT_HW_CPU_CYCLES": "cycles"}'
)


class PerfConfigError(ValueError):
    """A malformed perf event configuration; the message names the culprit and the fix."""


@dataclass(frozen=True)
class EventSpec:
    """One event to open: its ``perf_event_attr`` parameters and how to attribute it."""

    name: str
    alias: str
    type: int
    config: int
    config1: int = 0
    config2: int = 0
    kind: Kind = "dense"
    unit: str = "1"


@dataclass(frozen=True)
class Unavailable:
    """An event that cannot be encoded on this machine, and why."""

    name: str
    alias: str
    reason: str


@dataclass(frozen=True)
class EventSelection:
    """The encodable events, in the order given, and those that are not."""

    events: tuple[EventSpec, ...]
    unavailable: tuple[Unavailable, ...]


def default_event_names(has_pmu: bool) -> tuple[str, ...]:
    """The events measured when the user names none (hardware ones only with a PMU)."""
    software = ("task-clock", "page-faults", "context-switches")
    return (*software, "cycles", "instructions") if has_pmu else software


def classify(type_: int, config: int) -> tuple[Kind, str]:
    """The attribution kind and unit of an event, from its ``perf_event_attr`` type and config."""
    if type_ == PERF_TYPE_SOFTWARE:
        if config == 1:  # task-clock: on-CPU time, measured exactly
            return "time", "ns"
        if config == 0:  # cpu-clock: sampled and interpolated, like a hardware counter
            return "dense", "ns"
        if 2 <= config <= 6:  # faults, context switches, migrations
            return "sparse", "1"
    return "dense", "1"


def parse_events(
    value: str | os.PathLike[str] | Sequence[str], *, pfm_library: str = pfm.DEFAULT_LIBRARY
) -> EventSelection:
    """Resolve a selection of events (see the module docstring) against this machine.

    ``pfm_library`` is the libpfm4 shared library loaded for names with ``::``.
    """
    if isinstance(value, os.PathLike) or (
        isinstance(value, str) and value.strip().lower().endswith(".json")
    ):
        entries = _read_json(Path(value))
    else:
        items = [value] if isinstance(value, str) else value
        entries = [_split_alias(part) for item in items for part in item.split(",")]
    entries = [(name, alias) for name, alias in entries if name]
    if not entries:
        raise PerfConfigError(
            "no perf events selected: name at least one, e.g. 'task-clock,page-faults'"
        )
    events: list[EventSpec] = []
    unavailable: list[Unavailable] = []
    owners: dict[str, str] = {}
    for name, alias in entries:
        if alias is not None and not _ALIAS_RE.fullmatch(alias):
            raise PerfConfigError(
                f"invalid alias {alias!r} for perf event {name!r}: use only letters, digits, "
                "'_', '.' and '-'"
            )
        resolved = _resolve(name, alias, pfm_library)
        if resolved.alias in owners:
            raise PerfConfigError(
                f"duplicate perf event alias {resolved.alias!r} (events {owners[resolved.alias]!r}"
                f" and {name!r}): rename one with name=alias"
            )
        owners[resolved.alias] = name
        if isinstance(resolved, EventSpec):
            events.append(resolved)
        else:
            unavailable.append(resolved)
    times = [spec for spec in events if spec.kind == "time"]
    if len(times) > 1:
        first, second = (f"{spec.name!r} (alias {spec.alias!r})" for spec in times[:2])
        raise PerfConfigError(
            f"perf events {first} and {second} both count the thread's on-CPU time "
            "(task-clock), which is counted once: keep one"
        )
    taken = owners.get(TIME_ALIAS_DEFAULT)
    if taken is not None and not any(spec.kind == "time" for spec in events):
        raise PerfConfigError(
            f"perf event {taken!r} has the alias {TIME_ALIAS_DEFAULT!r}, the name of the "
            "on-CPU time otel-ort always counts: give it another alias"
        )
    return EventSelection(tuple(events), tuple(unavailable))


def _split_alias(entry: str) -> tuple[str, str | None]:
    name, sep, alias = entry.strip().rpartition("=")
    if not sep:
        return alias, None
    name, alias = name.strip(), alias.strip()
    if _MODIFIER_NAME_RE.fullmatch(name) and _MODIFIER_VALUE_RE.fullmatch(alias):
        return f"{name}={alias}", None  # a libpfm4 modifier such as :u=1, not an alias
    if not name:
        raise PerfConfigError(f"perf event entry {entry.strip()!r} has an alias but no event name")
    return name, alias


def _read_json(path: Path) -> list[tuple[str, str | None]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PerfConfigError(
            f"cannot read perf event file {str(path)!r} ({exc.strerror or exc}): it should hold "
            f"{_JSON_FORMAT}"
        ) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PerfConfigError(
            f"perf event file {str(path)!r} is not valid JSON ({exc}): it should hold "
            f"{_JSON_FORMAT}"
        ) from exc
    if not isinstance(data, dict):
        raise PerfConfigError(
            f"perf event file {str(path)!r} holds a JSON {type(data).__name__}, not {_JSON_FORMAT}"
        )
    bad = [name for name, alias in data.items() if not isinstance(alias, str)]
    if bad:
        raise PerfConfigError(
            f"perf event file {str(path)!r}: the alias of {bad[0]!r} is not a string; the file "
            f"should hold {_JSON_FORMAT}"
        )
    return [(name.strip(), alias.strip()) for name, alias in data.items()]


def _resolve(name: str, alias: str | None, pfm_library: str) -> EventSpec | Unavailable:
    if "::" in name:
        return _resolve_pfm(name, alias, pfm_library)
    generic = _BY_LOWER.get(name.lower())
    if generic is not None:
        return _spec(name, alias or name, *GENERIC_EVENTS[generic])
    raw = _RAW_RE.fullmatch(name)
    if raw is not None:
        config = int(raw.group(1), 16)
        if config >= 1 << 64:
            raise PerfConfigError(f"raw perf event {name!r} does not fit in 64 bits")
        return _spec(name, alias or name, PERF_TYPE_RAW, config)
    if _RAW_LIKE_RE.fullmatch(name):
        raise PerfConfigError(
            f"malformed raw perf event {name!r}: write r followed by hexadecimal digits, e.g. r01c2"
        )
    close = difflib.get_close_matches(name.lower(), _BY_LOWER, n=1)
    hint = (
        f" (did you mean {_BY_LOWER[close[0]]!r}?)"
        if close
        else ": use a perf name such as 'cycles', a raw 'rNNNN' or a libpfm4 'pmu::EVENT'"
    )
    return Unavailable(name, alias or _default_alias(name), f"unknown event name {name!r}{hint}")


def _resolve_pfm(name: str, alias: str | None, pfm_library: str) -> EventSpec | Unavailable:
    try:
        encoding = pfm.load(pfm_library).encode(name)
    except pfm.PfmUnavailableError as exc:
        return Unavailable(
            name, alias or _default_alias(name), f"cannot encode event {name!r}: {exc}"
        )
    except pfm.PfmEventError as exc:
        reason = f"libpfm4 cannot encode event {name!r} on this machine: {exc}"
        return Unavailable(name, alias or _default_alias(name), reason)
    if encoding.unapplied:
        reason = (
            f"libpfm4 encodes {name!r} with {' and '.join(encoding.unapplied)}, which otel-ort "
            "does not apply (it counts user mode, plus kernel mode where allowed): drop the "
            "modifier"
        )
        return Unavailable(name, alias or _default_alias(name), reason)
    generic = None
    if encoding.config1 == encoding.config2 == 0:
        generic = _GENERIC_NAME.get((encoding.type, encoding.config))
    return _spec(name, alias or generic or _default_alias(name), *_fields(encoding))


def _fields(encoding: pfm.Encoding) -> tuple[int, int, int, int]:
    return encoding.type, encoding.config, encoding.config1, encoding.config2


def _spec(
    name: str, alias: str, type_: int, config: int, config1: int = 0, config2: int = 0
) -> EventSpec:
    kind, unit = classify(type_, config)
    return EventSpec(name, alias, type_, config, config1, config2, kind, unit)


def _default_alias(name: str) -> str:
    """``name`` itself when it is a valid alias, else a readable one: ``skl::inst_retired_any``."""
    if _ALIAS_RE.fullmatch(name):
        return name
    lowered = name.lower().removeprefix("perf::")
    return re.sub(r"[^a-z0-9_.-]+", "_", lowered).strip("_") or "event"

"""The options of ``OrtInstrumentor().instrument(...)``, checked before anything is wrapped."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider

from otel_ort import environment_variables as env
from otel_ort.perf.events import (
    EventSelection,
    PerfConfigError,
    default_event_names,
    parse_events,
)
from otel_ort.profiles.spans import DEFAULT_MAX_TRACE_BYTES
from otel_ort.profiling.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    ProfileDirError,
    prepare_dir,
)
from otel_ort.sampling import Never, ProfileSampler, parse_sampler

_logger = logging.getLogger("otel_ort")

RequestHook = Callable[[Span, Any, Any], None]
"""``request_hook(span, session, feeds)``: called before the run, when the span is recording."""
ResponseHook = Callable[[Span, Any, Any], None]
"""``response_hook(span, session, outputs)``: called after a successful run, when recording."""

# Keys that BaseInstrumentor.instrument() consumes itself.
BASE_KEYS = frozenset({"skip_dep_check", "raise_exception_on_conflict"})


@dataclass(frozen=True, slots=True)
class Options:
    """Validated options; ``None`` means the default."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    request_hook: RequestHook | None = None
    response_hook: ResponseHook | None = None
    profiling: ProfilingOptions = field(default_factory=lambda: ProfilingOptions())  # noqa: PLW0108 (defined below)


PROFILE_MODES = ("on", "off")
CONVERSIONS = ("process", "thread")
_REMOVED_MODES = ("twin", "serve")


@dataclass(frozen=True, slots=True)
class ProfilingOptions:
    """Run-level profiling: which runs, where their files go, how many are kept."""

    sampler: ProfileSampler = field(default_factory=Never)
    directory: str | None = None
    """``None``: the default directory, created on the first profiled run."""
    max_files: int = DEFAULT_MAX_FILES
    max_bytes: int = DEFAULT_MAX_BYTES
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    """Bytes of node and kernel spans per profiled run, as OTLP protobuf."""
    mode: str = "on"
    conversion: str = "process"
    """Where profiles are converted: ``process`` (a process of otel-ort's, where it can) or
    ``thread`` (the profiler's worker thread)."""
    perf: PerfOptions | None = field(default_factory=lambda: PerfOptions())  # noqa: PLW0108
    """``None``: no perf counters."""


@dataclass(frozen=True, slots=True)
class PerfOptions:
    """Linux perf counters on profiled runs' nodes."""

    events: EventSelection = field(
        default_factory=lambda: parse_events(default_event_names(has_pmu=True))
    )
    explicit: bool = False
    """The user named the events: each one that cannot be counted is a warning (the defaults'
    hardware counters are only noted where the machine has no PMU)."""
    period_ns: int | None = None
    """Leader sampling period; ``None``: chosen from the measured cost of a sample."""


_EXPECTED: dict[str, tuple[type | None, str]] = {
    "tracer_provider": (TracerProvider, "an opentelemetry.trace.TracerProvider"),
    "meter_provider": (MeterProvider, "an opentelemetry.metrics.MeterProvider"),
    "request_hook": (None, "a callable (span, session, feeds) -> None"),
    "response_hook": (None, "a callable (span, session, outputs) -> None"),
}
_PERF_OFF = ("off", "none", "false", "0")
_PERF_DEFAULT = ("default", "on", "true", "1")


def parse_options(kwargs: Mapping[str, Any]) -> Options:
    """Check ``instrument()``'s options; raise ``ValueError``/``TypeError`` naming the fix.
    An ``OTEL_ORT_*`` variable otel-ort cannot use is logged instead, and profiling is off:
    under ``opentelemetry-instrument`` an error would stop every instrumentation."""
    unknown = sorted(set(kwargs) - set(_EXPECTED) - set(_VARIABLES) - BASE_KEYS)
    if unknown:
        raise ValueError(
            f"OrtInstrumentor.instrument() got unknown option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are {', '.join(sorted((*_EXPECTED, *_VARIABLES)))}"
        )
    values = {key: kwargs[key] for key in _EXPECTED if kwargs.get(key) is not None}
    for key, value in values.items():
        expected_type, description = _EXPECTED[key]
        valid = isinstance(value, expected_type) if expected_type else _takes_three(value)
        if not valid:
            raise TypeError(
                f"OrtInstrumentor.instrument({key}=...) must be {description}, "
                f"got {_describe(value)}"
            )
    try:
        profiling = _profiling_options(kwargs)
    except SettingError as exc:  # never fail opentelemetry-instrument's start over a variable
        _logger.error("otel-ort: %s; runs are traced but not profiled", exc)
        profiling = ProfilingOptions(mode="off")
    return Options(**values, profiling=profiling)


def _profiling_options(kwargs: Mapping[str, Any]) -> ProfilingOptions:
    """The ``profile_*`` and ``perf_*`` options, each falling back to its variable. Every
    argument is checked even when a variable is bad (``SettingError``, naming each bad one,
    after the arguments' own errors)."""
    bad: list[str] = []

    def parsed(key: str, parse: Callable[[Any, str], T]) -> T | None:
        try:
            return _parsed(kwargs, key, parse)
        except SettingError as exc:
            bad.append(str(exc))
            return None

    mode = parsed("profile_mode", _mode) or "on"
    sampler = parsed("profile_sampler", _sampler) or Never()
    # the directory is made only for a profiling that will run
    directory = parsed("profile_dir", _directory if mode != "off" and not bad else _path)
    max_files = parsed("profile_max_files", _positive) or DEFAULT_MAX_FILES
    max_bytes = parsed("profile_max_bytes", _positive) or DEFAULT_MAX_BYTES
    max_trace_bytes = parsed("profile_max_trace_bytes", _positive) or DEFAULT_MAX_TRACE_BYTES
    conversion = parsed("profile_conversion", _conversion) or "process"
    try:
        perf = perf_options(kwargs)
    except SettingError as exc:
        bad.append(str(exc))
    if bad:
        raise SettingError("; ".join(bad))
    return ProfilingOptions(
        sampler=sampler,
        directory=directory,
        max_files=max_files,
        max_bytes=max_bytes,
        max_trace_bytes=max_trace_bytes,
        mode=mode,
        conversion=conversion,
        perf=perf,
    )


def perf_options(
    kwargs: Mapping[str, Any], argument: Callable[[str], str] | None = None
) -> PerfOptions | None:
    """``perf_events`` (or ``$OTEL_ORT_PERF_EVENTS``): off, the defaults, a list or comma-
    separated string of events, or a perf_config.json path; and ``perf_period_ns`` (or
    ``$OTEL_ORT_PERF_PERIOD_NS``). ``None``: perf is off. ``argument``: how errors name an
    option (``instrument()``'s by default)."""
    events = _parsed(kwargs, "perf_events", _events, argument)
    if events is False:
        return None
    period = _parsed(kwargs, "perf_period_ns", _positive, argument)
    if events is None:
        return PerfOptions(period_ns=period)
    return PerfOptions(events, explicit=True, period_ns=period)


class SettingError(ValueError):
    """An ``OTEL_ORT_*`` variable otel-ort cannot use; the message names it and the fix."""


_VARIABLES = {  # the profile_* and perf_* options, and the variable each falls back to
    "profile_sampler": env.OTEL_ORT_PROFILE_SAMPLER,
    "profile_dir": env.OTEL_ORT_PROFILE_DIR,
    "profile_max_files": env.OTEL_ORT_PROFILE_MAX_FILES,
    "profile_max_bytes": env.OTEL_ORT_PROFILE_MAX_BYTES,
    "profile_max_trace_bytes": env.OTEL_ORT_PROFILE_MAX_TRACE_BYTES,
    "profile_mode": env.OTEL_ORT_PROFILE_MODE,
    "profile_conversion": env.OTEL_ORT_PROFILE_CONVERSION,
    "perf_events": env.OTEL_ORT_PERF_EVENTS,
    "perf_period_ns": env.OTEL_ORT_PERF_PERIOD_NS,
}
T = TypeVar("T")


def _parsed(
    kwargs: Mapping[str, Any],
    key: str,
    parse: Callable[[Any, str], T],
    argument: Callable[[str], str] | None = None,
) -> T | None:
    """``parse(value, source)`` of the argument ``key``, else of its variable (``None`` if
    neither is set); a bad variable raises ``SettingError``."""
    if kwargs.get(key) is not None:
        source = argument(key) if argument else f"OrtInstrumentor.instrument({key}=...)"
        return parse(kwargs[key], source)
    variable = _VARIABLES[key]
    value = os.environ.get(variable)
    if not value:
        return None
    try:
        return parse(value, f"${variable}")
    except (ValueError, TypeError) as exc:
        raise SettingError(str(exc)) from None


def _sampler(value: Any, source: str) -> ProfileSampler:
    if isinstance(value, str):
        try:
            return parse_sampler(value)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
    if not isinstance(value, ProfileSampler):
        raise TypeError(
            f"{source} must be an otel_ort.sampling sampler (Always(), Ratio(0.01), ...) or "
            f"its text form, got {_describe(value)}"
        )
    return value


def _path(value: Any, source: str) -> str:
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{source} must be a path, got {_describe(value)}")
    return os.fspath(value)


def _directory(value: Any, source: str) -> str:
    """A profile directory, created or checked (``ProfileDirError`` says why not)."""
    try:
        return prepare_dir(_path(value, source))
    except ProfileDirError as exc:
        raise ProfileDirError(f"{source}: {exc}") from None


def _mode(value: Any, source: str) -> str:
    mode = str(value).strip().lower()
    if mode in _REMOVED_MODES:
        raise ValueError(
            f"{source} is {value!r}: profiling no longer uses a twin of the session (selected "
            "runs are profiled on the session itself); use 'on' (the default) or 'off'"
        )
    if mode not in PROFILE_MODES:
        raise ValueError(f"{source} is {value!r}: use one of {', '.join(PROFILE_MODES)}")
    return mode


def _conversion(value: Any, source: str) -> str:
    conversion = str(value).strip().lower()
    if conversion not in CONVERSIONS:
        raise ValueError(f"{source} is {value!r}: use one of {', '.join(CONVERSIONS)}")
    return conversion


def _events(value: Any, source: str) -> EventSelection | Literal[False] | None:
    """The events asked for; ``False``: perf off; ``None``: the defaults."""
    if value is False or (isinstance(value, str) and value.strip().lower() in _PERF_OFF):
        return False
    if value is True or (isinstance(value, str) and value.strip().lower() in _PERF_DEFAULT):
        return None
    if isinstance(value, list | tuple):
        odd = next((item for item in value if not isinstance(item, str)), None)
        if odd is not None:
            raise TypeError(f"{source} must list event names as strings, got {odd!r}")
    elif not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"{source} must be a list of event names, a comma-separated string, a "
            f"perf_config.json path, True or False, got {_describe(value)}"
        )
    try:
        return parse_events(value)
    except PerfConfigError as exc:
        raise PerfConfigError(f"{source}: {exc}") from None


def _positive(value: Any, source: str) -> int:
    """A whole number >= 1: an ``int`` argument, or a variable's text (its source is ``$NAME``)."""
    if isinstance(value, str) and not source.startswith("$"):
        raise TypeError(f"{source} must be an int, got {_describe(value)}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool | float):
        raise ValueError(f"{source} must be a whole number >= 1, got {value!r}")
    return number


def _takes_three(hook: Any) -> bool:
    """Callable with three positional arguments (when Python can tell)."""
    if not callable(hook):
        return False
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):  # some builtins have no signature: trust them
        return True
    try:
        signature.bind(None, None, None)
    except TypeError:
        return False
    return True


def _describe(value: Any) -> str:
    if callable(value):
        try:
            return f"a callable with signature {inspect.signature(value)}"
        except (TypeError, ValueError):
            return "a callable"
    return type(value).__name__

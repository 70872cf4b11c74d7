"""The options of ``OrtInstrumentor().instrument(...)``, checked before anything is wrapped."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider

from otel_ort import environment_variables as env
from otel_ort.perf.events import EventSelection, default_event_names, parse_events
from otel_ort.profiling.store import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from otel_ort.sampling import Never, ProfileSampler, parse_sampler

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


PROFILE_MODES = ("twin", "serve", "off")


@dataclass(frozen=True, slots=True)
class ProfilingOptions:
    """Run-level profiling: which runs, where their files go, how many are kept."""

    sampler: ProfileSampler = field(default_factory=Never)
    directory: str | None = None
    """``None``: the default directory, created on the first profiled run."""
    max_files: int = DEFAULT_MAX_FILES
    max_bytes: int = DEFAULT_MAX_BYTES
    mode: str = "twin"
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
_PROFILE_KEYS = (
    "profile_sampler",
    "profile_dir",
    "profile_max_files",
    "profile_max_bytes",
    "profile_mode",
    "perf_events",
    "perf_period_ns",
)
_PERF_OFF = ("off", "none", "false", "0")


def parse_options(kwargs: Mapping[str, Any]) -> Options:
    """Check ``instrument()``'s options; raise ``ValueError``/``TypeError`` naming the fix."""
    unknown = sorted(set(kwargs) - set(_EXPECTED) - set(_PROFILE_KEYS) - BASE_KEYS)
    if unknown:
        raise ValueError(
            f"OrtInstrumentor.instrument() got unknown option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are {', '.join(sorted((*_EXPECTED, *_PROFILE_KEYS)))}"
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
    return Options(**values, profiling=_profiling_options(kwargs))


def _profiling_options(kwargs: Mapping[str, Any]) -> ProfilingOptions:
    """The ``profile_*`` options, each falling back to its ``OTEL_ORT_PROFILE_*`` variable."""
    sampler = _setting(kwargs, "profile_sampler", env.OTEL_ORT_PROFILE_SAMPLER)
    if isinstance(sampler, str):
        sampler = parse_sampler(sampler)
    elif sampler is None:
        sampler = Never()
    elif not isinstance(sampler, ProfileSampler):
        raise TypeError(
            "OrtInstrumentor.instrument(profile_sampler=...) must be an otel_ort.sampling "
            f"sampler (Always(), Ratio(0.01), ...) or its text form, got {_describe(sampler)}"
        )
    directory = _setting(kwargs, "profile_dir", env.OTEL_ORT_PROFILE_DIR)
    if directory is not None and not isinstance(directory, str | os.PathLike):
        raise TypeError(
            "OrtInstrumentor.instrument(profile_dir=...) must be a path, "
            f"got {_describe(directory)}"
        )
    mode = str(_setting(kwargs, "profile_mode", env.OTEL_ORT_PROFILE_MODE) or "twin").lower()
    if mode not in PROFILE_MODES:
        raise ValueError(
            f"OrtInstrumentor.instrument(profile_mode={mode!r}): use one of {PROFILE_MODES}"
        )
    return ProfilingOptions(
        sampler=sampler,
        directory=os.fspath(directory) if directory is not None else None,
        max_files=_positive(kwargs, "profile_max_files", env.OTEL_ORT_PROFILE_MAX_FILES)
        or DEFAULT_MAX_FILES,
        max_bytes=_positive(kwargs, "profile_max_bytes", env.OTEL_ORT_PROFILE_MAX_BYTES)
        or DEFAULT_MAX_BYTES,
        mode=mode,
        perf=perf_options(kwargs),
    )


def perf_options(kwargs: Mapping[str, Any]) -> PerfOptions | None:
    """``perf_events`` (or ``$OTEL_ORT_PERF_EVENTS``): off, the defaults, a list or comma-
    separated string of events, or a perf_config.json path; and ``perf_period_ns`` (or
    ``$OTEL_ORT_PERF_PERIOD_NS``). ``None``: perf is off."""
    value = _setting(kwargs, "perf_events", env.OTEL_ORT_PERF_EVENTS)
    if value is False or (isinstance(value, str) and value.strip().lower() in _PERF_OFF):
        return None
    period = _positive(kwargs, "perf_period_ns", env.OTEL_ORT_PERF_PERIOD_NS)
    if value is None or value is True or value == "default":
        return PerfOptions(period_ns=period)
    if not isinstance(value, str | os.PathLike | list | tuple):
        raise TypeError(
            "OrtInstrumentor.instrument(perf_events=...) must be a list of event names, a "
            "comma-separated string, a perf_config.json path, True or False, got "
            f"{_describe(value)}"
        )
    return PerfOptions(parse_events(value), explicit=True, period_ns=period)


def _setting(kwargs: Mapping[str, Any], key: str, variable: str) -> Any:
    value = kwargs.get(key)
    return value if value is not None else os.environ.get(variable) or None


def _positive(kwargs: Mapping[str, Any], key: str, variable: str) -> int | None:
    value = _setting(kwargs, key, variable)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool | float):
        source = f"${variable}" if key not in kwargs else f"OrtInstrumentor.instrument({key}=...)"
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

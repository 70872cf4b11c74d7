"""The options of ``OrtInstrumentor().instrument(...)``, checked before anything is wrapped."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider

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


_EXPECTED: dict[str, tuple[type | None, str]] = {
    "tracer_provider": (TracerProvider, "an opentelemetry.trace.TracerProvider"),
    "meter_provider": (MeterProvider, "an opentelemetry.metrics.MeterProvider"),
    "request_hook": (None, "a callable (span, session, feeds) -> None"),
    "response_hook": (None, "a callable (span, session, outputs) -> None"),
}


def parse_options(kwargs: Mapping[str, Any]) -> Options:
    """Check ``instrument()``'s options; raise ``ValueError``/``TypeError`` naming the fix."""
    unknown = sorted(set(kwargs) - set(_EXPECTED) - BASE_KEYS)
    if unknown:
        raise ValueError(
            f"OrtInstrumentor.instrument() got unknown option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are {', '.join(sorted(_EXPECTED))}"
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
    return Options(**values)


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

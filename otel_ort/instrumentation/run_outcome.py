"""A run span's end: its outcome (status, ``error.type``, the exception event), the session's
facts after an EP fallback, the hooks, and the duration record.

Nothing here may change what ORT returns or raises: otel-ort's own failures are reported
through :mod:`otel_ort.failures`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import Histogram
from opentelemetry.trace import Span, Status, StatusCode

from otel_ort import semconv
from otel_ort._util.text_limits import clip
from otel_ort.failures import report_failure
from otel_ort.instrumentation.session_facts import UNKNOWN_SESSION, SessionFacts, facts_for

Hook = Callable[[Span, Any, Any], None]
Args = tuple[Any, ...]
Kwargs = dict[str, Any]
OutputsOf = Callable[[Args, Kwargs, Any], Any]

OTHER_ERROR = "_OTHER"
"""``error.type`` when ORT reports a failure as text (``run_async``'s callback), not as an
exception."""


@dataclass(slots=True)
class TracedRun:
    """A run call being traced, on the paths that hand it on: profiled runs, ``run_async``."""

    span: Span
    facts: SessionFacts
    session: Any
    args: Args
    kwargs: Kwargs
    outputs_of: OutputsOf


class RunOutcome:
    """Ends run spans and records their durations, with one ``instrument()``'s histogram and
    ``response_hook``."""

    def __init__(self, duration: Histogram, response_hook: Hook | None) -> None:
        self.duration = duration
        self.response_hook = response_hook

    def finish(
        self,
        span: Span,
        facts: SessionFacts,
        session: Any,
        duration: float,
        error: BaseException | str | None,
        outputs: Any = None,
    ) -> None:
        """End the run span (calling ``response_hook`` after a success) and record its duration.

        Never raises but what ``response_hook`` raises that is not an ``Exception``
        (KeyboardInterrupt): the caller is about to return ORT's result or re-raise ORT's
        exception.
        """
        try:
            facts = current_facts(span, facts, session)
            if error is None:
                if self.response_hook is not None and span.is_recording():
                    call_hook("response_hook", self.response_hook, span, session, outputs)
                metric_attributes = facts.metric_attributes
            else:
                error_type = set_error(span, error)
                metric_attributes = {**facts.metric_attributes, semconv.ERROR_TYPE: error_type}
            self.duration.record(duration, metric_attributes)
        except Exception:
            report_failure("could not record a run's end")
        finally:
            try:
                span.end()
            except Exception:  # a span processor's on_end
                report_failure("could not end a run span")


def current_facts(span: Span, facts: SessionFacts, session: Any) -> SessionFacts:
    """``facts``, or new ones if ORT rebuilt the session during the run (its EP fallback)."""
    if facts is not UNKNOWN_SESSION and facts.providers_list is not getattr(
        session, "_providers", facts.providers_list
    ):
        return after_fallback(span, session)
    return facts


def after_fallback(span: Span, session: Any) -> SessionFacts:
    """ORT rebuilt the session during the run (its EP fallback): say so, with the new providers."""
    facts = facts_for(session)
    if span.is_recording():
        span.set_attributes(
            {
                semconv.SESSION_PROVIDERS: facts.run_attributes[semconv.SESSION_PROVIDERS],
                semconv.RUN_PROVIDER_FALLBACK: True,
            }
        )
    return facts


def set_error(span: Span, error: BaseException | str) -> str:
    """Mark ``span`` failed; return the ``error.type`` value."""
    if isinstance(error, BaseException):
        error_type = type(error).__qualname__
        span.record_exception(error)
        description = f"{error_type}: {error}"
    else:
        error_type = OTHER_ERROR
        description = error
    span.set_attribute(semconv.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, clip(description)))
    return error_type


def call_hook(role: str, hook: Hook, span: Span, session: Any, data: Any) -> None:
    """Call a user's hook; what it raises that is an ``Exception`` is reported, not raised."""
    try:
        hook(span, session, data)
    except Exception:
        report_failure(f"{role} raised")

"""``InferenceSession.__init__`` traced: an ``onnxruntime.session.create`` span around ORT's
constructor, the session's facts computed then (so that its first run does not pay for
them), and the intra-op threads the constructor started (perf counts them on profiled runs).

Nothing here may change what ORT's constructor returns or raises: otel-ort's own failures are
reported through :mod:`otel_ort.failures`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind

from otel_ort import semconv
from otel_ort.failures import report_failure
from otel_ort.instrumentation.run_outcome import Args, Kwargs, set_error
from otel_ort.instrumentation.session_facts import facts_for, model_label, session_span_attributes
from otel_ort.instrumentation.wrappers import RunTelemetry, suppressed
from otel_ort.profiling.session_runs import live_thread_ids, note_pool_threads

Method = Callable[..., Any]


def init_method(telemetry: RunTelemetry, original: Method) -> Method:
    """``InferenceSession.__init__`` (``original``, taking the session first), traced with
    ``telemetry``'s tracer; untraced but for the intra-op threads when instrumentation is
    suppressed, and only delegating once ``telemetry`` is inert."""

    def traced(session: Any, *args: Any, **kwargs: Any) -> None:
        _init(telemetry, original, session, args, kwargs)

    return traced


def _init(
    telemetry: RunTelemetry, original: Method, session: Any, args: Args, kwargs: Kwargs
) -> None:
    if telemetry.inert or suppressed(otel_context.get_current()):
        _construct(telemetry, original, session, args, kwargs)
        return
    try:
        span = telemetry.tracer.start_span(semconv.SPAN_SESSION_CREATE, kind=SpanKind.INTERNAL)
    except Exception:
        report_failure("could not start a session span")
        _construct(telemetry, original, session, args, kwargs)
        return
    try:
        _construct(telemetry, original, session, args, kwargs)
    except BaseException as exc:
        _end_session_span(span, session, exc)
        raise
    _end_session_span(span, session, None)


def _construct(
    telemetry: RunTelemetry, original: Method, session: Any, args: Args, kwargs: Kwargs
) -> None:
    """ORT's constructor; with a profiler, the threads that appeared meanwhile."""
    if telemetry.profiler is None or telemetry.inert:
        original(session, *args, **kwargs)
        return
    try:
        before = live_thread_ids()
    except OSError:
        report_failure("could not list this process's threads")
        original(session, *args, **kwargs)
        return
    original(session, *args, **kwargs)
    try:
        note_pool_threads(session, before)
    except Exception:
        report_failure("could not note a session's intra-op threads")


def _end_session_span(span: Span, session: Any, error: BaseException | None) -> None:
    try:
        if error is None:
            facts = facts_for(session)  # now, so that the first run does not pay for it
            if span.is_recording():
                span.set_attributes(session_span_attributes(session, facts))
        elif span.is_recording():
            span.set_attribute(semconv.MODEL_PATH, model_label(session))
            set_error(span, error)
        span.end()
    except Exception:
        report_failure("could not end a session span")

"""``OrtInstrumentor``: a span and a duration measurement for every ONNX Runtime run.

The run methods of ``onnxruntime``'s Python ``Session`` class are wrapped on the class, so
sessions created before ``instrument()`` are covered too. Per-session attributes come from
:mod:`otel_ort.session_facts` (computed once); per run the wrapper only reads the clock,
starts and ends one span, describes the inputs when the span is recording, and records one
histogram value. The run span is not made the current span: ORT runs the graph in C++, where
no Python code would see it, and attaching a context would double the cost of an unsampled run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from time import perf_counter
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)
from opentelemetry.instrumentation.utils import _SUPPRESS_INSTRUMENTATION_KEY_PLAIN, unwrap
from opentelemetry.metrics import NoOpHistogram, get_meter
from opentelemetry.trace import NoOpTracer, Span, SpanKind, Status, StatusCode, get_tracer
from wrapt import wrap_function_wrapper

from otel_ort import semconv
from otel_ort.feeds import describe_feeds
from otel_ort.metrics import run_duration_histogram
from otel_ort.options import Options, parse_options
from otel_ort.package import _instruments, _instruments_any
from otel_ort.session_facts import UNKNOWN_SESSION, SessionFacts, facts_for, model_label
from otel_ort.version import __version__

_logger = logging.getLogger(__name__)

_SESSION_MODULE = "onnxruntime.capi.onnxruntime_inference_collection"

# error.type when ORT reports a failure as text (run_async's callback), not as an exception
_OTHER_ERROR = "_OTHER"

Args = tuple[Any, ...]
Kwargs = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kwargs], Any]


def _suppressed() -> bool:
    """``not is_instrumentation_enabled()`` with one context read instead of four calls."""
    current = otel_context.get_current()
    return bool(
        current.get(_SUPPRESS_INSTRUMENTATION_KEY)
        or current.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN)
    )


def _arg(args: Args, kwargs: Kwargs, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _feeds_at(index: int, name: str) -> Callable[[Args, Kwargs], Any]:
    def feeds(args: Args, kwargs: Kwargs) -> Any:
        return args[index] if len(args) > index else kwargs.get(name)

    return feeds


def _vector_feeds(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    names = _arg(args, kwargs, 1, "feed_names") or ()
    values = _arg(args, kwargs, 2, "feeds") or ()
    return dict(zip(names, values, strict=False))


def _returned(args: Args, kwargs: Kwargs, result: Any) -> Any:
    return result


FeedsOf = Callable[[Args, Kwargs], Any]
OutputsOf = Callable[[Args, Kwargs, Any], Any]

_RUN_ASYNC_FEEDS = _feeds_at(1, "input_feed")

# run method → (what request_hook receives as feeds, what response_hook receives as outputs).
# A Mapping of feeds is also described in onnxruntime.run.inputs; an IOBinding is not.
_RUN_METHODS: dict[str, tuple[FeedsOf, OutputsOf]] = {
    "run": (_feeds_at(1, "input_feed"), _returned),
    "run_with_ort_values": (_feeds_at(1, "input_dict_ort_values"), _returned),
    "run_with_ortvaluevector": (
        _vector_feeds,
        lambda args, kwargs, result: _arg(args, kwargs, 4, "fetches"),
    ),
    "run_with_iobinding": (
        _feeds_at(0, "iobinding"),
        lambda args, kwargs, result: _arg(args, kwargs, 0, "iobinding"),
    ),
}


class OrtInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """OpenTelemetry instrumentation for ONNX Runtime ``InferenceSession``.

    ``OrtInstrumentor().instrument(tracer_provider=None, meter_provider=None,
    request_hook=None, response_hook=None)``; see ``README.md`` for what each run records.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _check_dependency_conflicts(self) -> DependencyConflict | None:
        # any one ORT distribution will do (the base class would require all of them)
        return get_dependency_conflicts(_instruments, _instruments_any)

    def instrument(self, **kwargs: Any) -> None:
        """Wrap ONNX Runtime; bad options raise here, before anything is wrapped."""
        parse_options(kwargs)
        super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        from onnxruntime.capi import onnxruntime_inference_collection as collection

        telemetry = _RunTelemetry(parse_options(kwargs))
        wrap_function_wrapper(_SESSION_MODULE, "InferenceSession.__init__", telemetry.wrap_init)
        wrappers = {method: telemetry.wrapper(method) for method in _RUN_METHODS}
        wrappers["run_async"] = telemetry.wrap_run_async
        for method, wrapper in wrappers.items():
            if hasattr(collection.Session, method):  # older ORT releases lack some of them
                wrap_function_wrapper(_SESSION_MODULE, f"Session.{method}", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        from onnxruntime.capi import onnxruntime_inference_collection as collection

        unwrap(collection.InferenceSession, "__init__")
        for method in (*_RUN_METHODS, "run_async"):
            unwrap(collection.Session, method)


class _RunTelemetry:
    """The tracer, histogram and hooks of one ``instrument()`` call, and the wrappers using them."""

    def __init__(self, options: Options) -> None:
        self._tracer = get_tracer("otel_ort", __version__, options.tracer_provider)
        self._duration = run_duration_histogram(
            get_meter("otel_ort", __version__, options.meter_provider)
        )
        self._request_hook = options.request_hook
        self._response_hook = options.response_hook
        self.inert = isinstance(self._tracer, NoOpTracer) and isinstance(
            self._duration, NoOpHistogram
        )
        """No-op tracer and meter providers: nothing to record, so the wrappers only delegate."""

    def wrapper(self, method: str) -> Wrapper:
        """The wrapt wrapper of one synchronous run method."""
        feeds_of, outputs_of = _RUN_METHODS[method]

        def run_wrapper(
            wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
        ) -> Any:
            if self.inert or _suppressed():
                return wrapped(*args, **kwargs)
            try:
                span, facts = self._start(session, method, feeds_of, args, kwargs)
            except Exception:  # e.g. a span processor that raises: the run goes on untraced
                _logger.exception("otel-ort could not start a span for an ONNX Runtime run")
                return wrapped(*args, **kwargs)
            start = perf_counter()
            try:
                result = wrapped(*args, **kwargs)
            except BaseException as exc:
                self._finish(span, facts, session, perf_counter() - start, exc)
                raise
            duration = perf_counter() - start
            outputs = outputs_of(args, kwargs, result) if self._response_hook else None
            self._finish(span, facts, session, duration, None, outputs)
            return result

        return run_wrapper

    def wrap_run_async(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> Any:
        """``run_async``: the span ends when ORT calls the user's callback."""
        if self.inert or _suppressed():
            return wrapped(*args, **kwargs)
        try:
            span, facts = self._start(session, "run_async", _RUN_ASYNC_FEEDS, args, kwargs)
        except Exception:
            _logger.exception("otel-ort could not start a span for an ONNX Runtime run")
            return wrapped(*args, **kwargs)
        callback = _arg(args, kwargs, 2, "callback")
        caller_context = otel_context.get_current()
        start = perf_counter()

        def on_done(results: Any, user_data: Any, err: str) -> Any:
            self._finish(span, facts, session, perf_counter() - start, err or None, results)
            token = otel_context.attach(caller_context)  # the callback continues the caller's trace
            try:
                return callback(results, user_data, err)
            finally:
                otel_context.detach(token)

        if len(args) > 2:
            args = (*args[:2], on_done, *args[3:])
        else:
            kwargs = {**kwargs, "callback": on_done}
        try:
            return wrapped(*args, **kwargs)
        except BaseException as exc:
            self._finish(span, facts, session, perf_counter() - start, exc)
            raise

    def wrap_init(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> None:
        """``InferenceSession.__init__``: a span for loading the model; the session's facts."""
        if self.inert or _suppressed():
            return wrapped(*args, **kwargs)  # type: ignore[no-any-return]
        span = self._tracer.start_span(semconv.SPAN_SESSION_CREATE, kind=SpanKind.INTERNAL)
        try:
            wrapped(*args, **kwargs)
        except BaseException as exc:
            if span.is_recording():
                span.set_attribute(semconv.MODEL_PATH, model_label(session))
                _set_error(span, exc)
            span.end()
            raise
        try:
            facts = facts_for(session)
            if span.is_recording():
                span.set_attributes(facts.session_attributes)
        except Exception:
            _logger.exception("otel-ort could not describe a new ONNX Runtime session")
        span.end()
        return None

    def _start(
        self, session: Any, method: str, feeds_of: FeedsOf, args: Args, kwargs: Kwargs
    ) -> tuple[Span, SessionFacts]:
        """Start a run span; describe the inputs and call ``request_hook`` if it is recording."""
        try:
            facts = facts_for(session)
        except Exception:  # otel-ort's own failure: the run still gets a span
            _logger.exception("otel-ort could not describe an ONNX Runtime session")
            facts = UNKNOWN_SESSION
        span = self._tracer.start_span(
            semconv.SPAN_RUN, kind=SpanKind.INTERNAL, attributes=facts.run_attributes
        )
        if span.is_recording():
            feeds = feeds_of(args, kwargs)
            try:
                attributes: dict[str, Any] = {semconv.RUN_METHOD: method}
                if type(feeds) is dict or isinstance(feeds, Mapping):  # ABC check is slow
                    attributes[semconv.RUN_INPUTS] = describe_feeds(feeds.items(), len(feeds))
                span.set_attributes(attributes)
            except Exception:
                _logger.exception("otel-ort could not describe the inputs of a run")
            if self._request_hook is not None:
                _call_hook("request_hook", self._request_hook, span, session, feeds)
        return span, facts

    def _finish(
        self,
        span: Span,
        facts: SessionFacts,
        session: Any,
        duration: float,
        error: BaseException | str | None,
        outputs: Any = None,
    ) -> None:
        """End the run span (calling ``response_hook`` after a success) and record its duration.

        Never raises: the caller is about to return ORT's result or re-raise ORT's exception.
        """
        try:
            if error is None:
                if self._response_hook is not None and span.is_recording():
                    _call_hook("response_hook", self._response_hook, span, session, outputs)
                metric_attributes = facts.metric_attributes
            else:
                error_type = _set_error(span, error)
                metric_attributes = {**facts.metric_attributes, semconv.ERROR_TYPE: error_type}
            span.end()
            self._duration.record(duration, metric_attributes)
        except Exception:
            _logger.exception("otel-ort could not end the span of an ONNX Runtime run")


def _set_error(span: Span, error: BaseException | str) -> str:
    """Mark ``span`` failed; return the ``error.type`` value."""
    if isinstance(error, BaseException):
        error_type = type(error).__qualname__
        span.record_exception(error)
        description = f"{error_type}: {error}"
    else:
        error_type = _OTHER_ERROR
        description = error
    span.set_attribute(semconv.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description))
    return error_type


def _call_hook(
    role: str, hook: Callable[[Span, Any, Any], None], span: Span, session: Any, data: Any
) -> None:
    try:
        hook(span, session, data)
    except Exception:
        _logger.exception("otel-ort: %s raised; the run is unaffected", role)

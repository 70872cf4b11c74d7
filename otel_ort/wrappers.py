"""The wrapt wrappers: a span and a duration measurement around every ONNX Runtime run.

Per run the wrapper reads the cached session facts, starts one span as a child of the current
context, describes the inputs and calls ``request_hook`` only when the span is recording,
reads the clock around ORT's call, then ends the span and records one histogram value. The
run span is not made the current span: ORT runs the graph in C++, where no Python code would
see it, and attaching a context would double the cost of an unsampled run.

Nothing here may change what ORT returns or raises: otel-ort's own failures are reported
through :mod:`otel_ort.failures` and the run goes ahead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from time import perf_counter, time_ns
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context
from opentelemetry.instrumentation.utils import _SUPPRESS_INSTRUMENTATION_KEY_PLAIN
from opentelemetry.metrics import NoOpHistogram, get_meter
from opentelemetry.trace import NoOpTracer, Span, SpanKind, Status, StatusCode, get_tracer

from otel_ort import semconv
from otel_ort.failures import report_failure
from otel_ort.feeds import describe_feeds
from otel_ort.metrics import run_duration_histogram
from otel_ort.options import Options
from otel_ort.profiling.session_runs import (
    SessionRuns,
    live_thread_ids,
    note_pool_threads,
    session_runs,
)
from otel_ort.session_facts import (
    UNKNOWN_SESSION,
    SessionFacts,
    facts_for,
    model_label,
    session_span_attributes,
)
from otel_ort.text_limits import clip
from otel_ort.version import __version__

if TYPE_CHECKING:
    from otel_ort.profiling.profiled_call import ProfiledCall, ProfiledRun
    from otel_ort.profiling.profiler import Profiler

Args = tuple[Any, ...]
Kwargs = dict[str, Any]
Wrapper = Callable[[Callable[..., Any], Any, Args, Kwargs], Any]
FeedsOf = Callable[[Args, Kwargs], Any]
OutputsOf = Callable[[Args, Kwargs, Any], Any]

# error.type when ORT reports a failure as text (run_async's callback), not as an exception
_OTHER_ERROR = "_OTHER"


def _arg(index: int, name: str) -> FeedsOf:
    """A getter of one argument of a wrapped call, passed by position or by name."""

    def get(args: Args, kwargs: Kwargs) -> Any:
        return args[index] if len(args) > index else kwargs.get(name)

    return get


_INPUT_FEED = _arg(1, "input_feed")
_CALLBACK = _arg(2, "callback")
_FEED_NAMES = _arg(1, "feed_names")
_FEED_VALUES = _arg(2, "feeds")
_FETCHES = _arg(4, "fetches")
_IOBINDING = _arg(0, "iobinding")


def _vector_feeds(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    names = _FEED_NAMES(args, kwargs) or ()
    return dict(zip(names, _FEED_VALUES(args, kwargs) or (), strict=False))


def _returned(args: Args, kwargs: Kwargs, result: Any) -> Any:
    return result


# Synchronous run method → (what request_hook receives as feeds, what response_hook receives
# as outputs). Feeds that are a Mapping are also described in onnxruntime.run.inputs.
RUN_METHODS: dict[str, tuple[FeedsOf, OutputsOf]] = {
    "run": (_INPUT_FEED, _returned),
    "run_with_ort_values": (_arg(1, "input_dict_ort_values"), _returned),
    "run_with_ortvaluevector": (_vector_feeds, lambda args, kwargs, _: _FETCHES(args, kwargs)),
    "run_with_iobinding": (_IOBINDING, lambda args, kwargs, _: _IOBINDING(args, kwargs)),
}


@dataclass(frozen=True, slots=True)
class _Run:
    """A run call being traced."""

    span: Span
    facts: SessionFacts
    session: Any
    args: Args
    kwargs: Kwargs
    outputs_of: OutputsOf


def _suppressed(current: Context) -> bool:
    """``not is_instrumentation_enabled()`` on the context read once per run."""
    return bool(
        current.get(_SUPPRESS_INSTRUMENTATION_KEY)
        or current.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN)
    )


class RunTelemetry:
    """The tracer, histogram and hooks of one ``instrument()`` call, and the wrappers using them."""

    def __init__(self, options: Options, profiler: Profiler | None = None) -> None:
        self._profiler = profiler
        self._tracer = get_tracer("otel_ort", __version__, options.tracer_provider)
        self._duration = run_duration_histogram(
            get_meter("otel_ort", __version__, options.meter_provider)
        )
        self._request_hook = options.request_hook
        self._response_hook = options.response_hook
        self.inert = isinstance(self._tracer, NoOpTracer) and isinstance(
            self._duration, NoOpHistogram
        )
        """No-op tracer and meter providers, or uninstrumented (a bound ``session.run`` taken
        before keeps its wrapper): nothing to record, so the wrappers only delegate."""

    def run_wrapper(self, method: str) -> Wrapper:
        """The wrapper of one synchronous run method (a key of ``RUN_METHODS``)."""
        feeds_of, outputs_of = RUN_METHODS[method]

        def run_wrapper(
            wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
        ) -> Any:
            if self.inert:
                return wrapped(*args, **kwargs)
            current = otel_context.get_current()
            if _suppressed(current):
                return self._untraced(wrapped, session, args, kwargs)
            try:
                span, facts = self._start(session, method, feeds_of, args, kwargs)
            except Exception:  # e.g. a span processor that raises: the run goes on untraced
                report_failure("could not start a run span")
                return self._untraced(wrapped, session, args, kwargs)
            run = _Run(span, facts, session, args, kwargs, outputs_of)
            profiler = self._profiler
            if profiler is None:
                return self._run(wrapped, run)
            runs = session_runs(session)
            call = self._profiled_call(profiler, run, current, runs, method)
            if call is not None:
                return self._run_profiled(wrapped, run, call, profiler)
            try:
                runs.enter()  # waits while the session's first profiled run runs alone
            except BaseException as exc:
                self._finish(span, facts, session, 0.0, exc)
                raise
            try:
                return self._run(wrapped, run)
            finally:
                runs.leave()
                if runs.primed and profiler.pool_logs is not None:
                    profiler.pool_logs.ran(runs.nodes)

        return run_wrapper

    def _untraced(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> Any:
        """ORT's run, untraced; with profiling on, still among its session's runs in flight:
        a session's first profiled run must not overlap it."""
        if self._profiler is None:
            return wrapped(*args, **kwargs)
        runs = session_runs(session)
        runs.enter()
        try:
            return wrapped(*args, **kwargs)
        finally:
            runs.leave()

    def _run(self, wrapped: Callable[..., Any], run: _Run) -> Any:
        """ORT's own run, timed; the span ends with its outcome."""
        start = perf_counter()
        try:
            result = wrapped(*run.args, **run.kwargs)
        except BaseException as exc:
            self._finish(run.span, run.facts, run.session, perf_counter() - start, exc)
            raise
        duration = perf_counter() - start
        outputs = run.outputs_of(run.args, run.kwargs, result) if self._response_hook else None
        self._finish(run.span, run.facts, run.session, duration, None, outputs)
        return result

    def _profiled_call(
        self, profiler: Profiler, run: _Run, current: Context, runs: SessionRuns, method: str
    ) -> ProfiledCall | None:
        """The run made profiled, if the profiler selects it and can; ``None`` otherwise (a
        selected run's span says why)."""
        try:
            return _profile(
                profiler, run.span, current, run.session, runs, method, run.args, run.kwargs
            )
        except BaseException as exc:  # KeyboardInterrupt in a sampler or at the gate
            self._finish(run.span, run.facts, run.session, 0.0, exc)
            raise

    def _run_profiled(
        self, wrapped: Callable[..., Any], run: _Run, call: ProfiledCall, profiler: Profiler
    ) -> Any:
        """ORT's own run with the profiling ``RunOptions``; the worker ends its span."""
        start = perf_counter()
        try:
            call.begin()
            start = perf_counter()
            result = wrapped(*call.args, **call.kwargs)
        except BaseException as exc:
            _failed(profiler, call)
            self._finish(run.span, run.facts, run.session, perf_counter() - start, exc)
            raise
        duration = perf_counter() - start
        end_ns = time_ns()
        outputs = run.outputs_of(run.args, run.kwargs, result) if self._response_hook else None
        if profiler.pool_logs is not None:
            profiler.pool_logs.cleared()
        try:
            profiled = call.end()
        except Exception:  # otel-ort's: ORT's result is returned all the same
            report_failure("could not end a profiled run")
            _failed(profiler, call)
            self._finish(run.span, run.facts, run.session, duration, None, outputs)
            return result
        self._finish_profiled(run, duration, end_ns, profiled, outputs, call.runs)
        return result

    def run_async_wrapper(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> Any:
        """``run_async``: the span ends when ORT calls the user's callback, which then runs in
        the caller's context. A call without a callable callback goes to ORT untouched, so
        ORT's own argument errors stay as they are."""
        callback = _CALLBACK(args, kwargs)
        if self.inert or not callable(callback):
            return wrapped(*args, **kwargs)
        caller_context = otel_context.get_current()
        if _suppressed(caller_context):
            return self._untraced_async(wrapped, session, args, kwargs, callback)
        try:
            span, facts = self._start(session, "run_async", _INPUT_FEED, args, kwargs)
        except Exception:
            report_failure("could not start a run span")
            return self._untraced_async(wrapped, session, args, kwargs, callback)
        run = _Run(span, facts, session, args, kwargs, _returned)
        profiler = self._profiler
        runs = session_runs(session) if profiler is not None else None
        call = None
        if profiler is not None and runs is not None:
            call = self._profiled_call(profiler, run, caller_context, runs, "run_async")
            if call is not None:
                args, kwargs = call.args, call.kwargs
            else:
                try:
                    runs.enter()
                except BaseException as exc:
                    self._finish(span, facts, session, 0.0, exc)
                    raise
        start = [perf_counter()]
        on_done = self._on_done(run, profiler, runs, call, callback, caller_context, start)
        args, kwargs = _with_callback(args, kwargs, on_done)
        try:
            if call is not None:
                call.begin()
                start[0] = perf_counter()
            return wrapped(*args, **kwargs)
        except BaseException as exc:
            self._ended(profiler, runs, call)
            self._finish(span, facts, session, perf_counter() - start[0], exc)
            raise

    def _on_done(
        self,
        run: _Run,
        profiler: Profiler | None,
        runs: SessionRuns | None,
        call: ProfiledCall | None,
        callback: Callable[[Any, Any, str], Any],
        caller_context: Context,
        start: list[float],
    ) -> Callable[[Any, Any, str], Any]:
        """``run_async``'s callback: end the run (its span, or its profiled run's hand-off),
        then call the user's ``callback`` in the caller's context."""

        def on_done(results: Any, user_data: Any, err: str) -> Any:
            try:
                duration = perf_counter() - start[0]
                if call is not None and profiler is not None and not err:
                    end_ns = time_ns()
                    profiled = call.end()
                    self._finish_profiled(
                        run, duration, end_ns, profiled, results, call.runs, asynchronous=True
                    )
                else:
                    self._ended(profiler, runs, call)
                    self._finish(run.span, run.facts, run.session, duration, err or None, results)
            finally:  # even after a response_hook's KeyboardInterrupt: the caller waits on it
                token = otel_context.attach(caller_context)
                try:
                    returned = callback(results, user_data, err)
                finally:
                    otel_context.detach(token)
            return returned

        return on_done

    def _untraced_async(
        self,
        wrapped: Callable[..., Any],
        session: Any,
        args: Args,
        kwargs: Kwargs,
        callback: Callable[[Any, Any, str], Any],
    ) -> Any:
        """``run_async``, untraced; with profiling on, still among its session's runs in
        flight until ORT calls back."""
        if self._profiler is None:
            return wrapped(*args, **kwargs)
        runs = session_runs(session)

        def on_done(results: Any, user_data: Any, err: str) -> Any:
            runs.leave()
            return callback(results, user_data, err)

        args, kwargs = _with_callback(args, kwargs, on_done)
        runs.enter()
        try:
            return wrapped(*args, **kwargs)
        except BaseException:
            runs.leave()
            raise

    @staticmethod
    def _ended(
        profiler: Profiler | None, runs: SessionRuns | None, call: ProfiledCall | None
    ) -> None:
        """A ``run_async`` run failed or ended unprofiled: its place in the session's runs."""
        if call is not None and profiler is not None:
            _failed(profiler, call, asynchronous=True)
        elif runs is not None:
            runs.leave()

    def init_wrapper(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> None:
        """``InferenceSession.__init__``: a span for loading the model; the session's facts;
        the intra-op threads its constructor started (even untraced: perf counts them on its
        profiled runs)."""
        if self.inert or _suppressed(otel_context.get_current()):
            self._construct(wrapped, session, args, kwargs)
            return
        try:
            span = self._tracer.start_span(semconv.SPAN_SESSION_CREATE, kind=SpanKind.INTERNAL)
        except Exception:
            report_failure("could not start a session span")
            self._construct(wrapped, session, args, kwargs)
            return
        try:
            self._construct(wrapped, session, args, kwargs)
        except BaseException as exc:
            self._end_session_span(span, session, exc)
            raise
        self._end_session_span(span, session, None)

    def _construct(
        self, wrapped: Callable[..., Any], session: Any, args: Args, kwargs: Kwargs
    ) -> None:
        """ORT's constructor; with a profiler, the threads that appeared meanwhile."""
        if self._profiler is None or self.inert:
            wrapped(*args, **kwargs)
            return
        try:
            before = live_thread_ids()
        except OSError:
            report_failure("could not list this process's threads")
            wrapped(*args, **kwargs)
            return
        wrapped(*args, **kwargs)
        try:
            note_pool_threads(session, before)
        except Exception:
            report_failure("could not note a session's intra-op threads")

    def _end_session_span(self, span: Span, session: Any, error: BaseException | None) -> None:
        try:
            if error is None:
                facts = facts_for(session)  # now, so that the first run does not pay for it
                if span.is_recording():
                    span.set_attributes(session_span_attributes(session, facts))
            elif span.is_recording():
                span.set_attribute(semconv.MODEL_PATH, model_label(session))
                _set_error(span, error)
            span.end()
        except Exception:
            report_failure("could not end a session span")

    def _start(
        self, session: Any, method: str, feeds_of: FeedsOf, args: Args, kwargs: Kwargs
    ) -> tuple[Span, SessionFacts]:
        """Start a run span; describe the inputs and call ``request_hook`` if it is recording."""
        try:
            facts = facts_for(session)
        except Exception:  # otel-ort's own failure: the run still gets a span
            report_failure("could not describe an ONNX Runtime session")
            facts = UNKNOWN_SESSION
        span = self._tracer.start_span(
            semconv.SPAN_RUN, kind=SpanKind.INTERNAL, attributes=facts.run_attributes
        )
        if span.is_recording():
            feeds = None
            try:
                feeds = feeds_of(args, kwargs)
                attributes: dict[str, Any] = {semconv.RUN_METHOD: method}
                if type(feeds) is dict or isinstance(feeds, Mapping):  # ABC check is slow
                    attributes[semconv.RUN_INPUTS] = describe_feeds(feeds)
                span.set_attributes(attributes)
            except Exception:
                report_failure("could not describe the inputs of a run")
            if self._request_hook is not None:
                try:
                    _call_hook("request_hook", self._request_hook, span, session, feeds)
                except BaseException:  # KeyboardInterrupt in the hook: no run, no open span
                    span.end()
                    raise
        return span, facts

    def _finish_profiled(
        self,
        run: _Run,
        duration: float,
        end_ns: int,
        profiled: ProfiledRun,
        outputs: Any,
        runs: SessionRuns,
        asynchronous: bool = False,
    ) -> None:
        """A profiled run: ``response_hook`` here; the profiler's worker marks the span,
        records the duration and ends the span, with its tree (off the caller's path)."""
        span, facts = run.span, run.facts
        try:  # response_hook may raise KeyboardInterrupt: the hand-off still uses its place
            facts = _current_facts(span, facts, run.session)
            if self._response_hook is not None and span.is_recording():
                _call_hook("response_hook", self._response_hook, span, run.session, outputs)
        except Exception:
            report_failure("could not record a run's end")
        finally:
            measured = partial(self._measured, span, facts, duration, profiled)
            try:
                assert self._profiler is not None
                self._profiler.finish(span, end_ns, profiled, facts, runs, measured, asynchronous)
            except Exception:
                report_failure("could not hand a profiled run over")
                span.end(end_ns)

    def _measured(
        self, span: Span, facts: SessionFacts, duration: float, profiled: ProfiledRun
    ) -> None:
        """(worker) A profiled run's span marked, its duration recorded."""
        try:
            if span.is_recording():
                span.set_attributes(
                    {
                        semconv.RUN_PROFILED: True,
                        semconv.PROFILE_FILE: profiled.files.path,
                        semconv.PROFILE_OVERLAPPING_RUNS: profiled.overlapping,
                    }
                )
            self._duration.record(duration, {**facts.metric_attributes, semconv.RUN_PROFILED: True})
        except Exception:
            report_failure("could not mark a profiled run span")

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

        Never raises but what ``response_hook`` raises that is not an ``Exception``
        (KeyboardInterrupt): the caller is about to return ORT's result or re-raise ORT's
        exception.
        """
        try:
            facts = _current_facts(span, facts, session)
            if error is None:
                if self._response_hook is not None and span.is_recording():
                    _call_hook("response_hook", self._response_hook, span, session, outputs)
                metric_attributes = facts.metric_attributes
            else:
                error_type = _set_error(span, error)
                metric_attributes = {**facts.metric_attributes, semconv.ERROR_TYPE: error_type}
            self._duration.record(duration, metric_attributes)
        except Exception:
            report_failure("could not record a run's end")
        finally:
            try:
                span.end()
            except Exception:  # a span processor's on_end
                report_failure("could not end a run span")


def _profile(
    profiler: Profiler,
    span: Span,
    current: Context,
    session: Any,
    runs: SessionRuns,
    method: str,
    args: Args,
    kwargs: Kwargs,
) -> ProfiledCall | None:
    """The call made profiled if the profiler selects it (in the caller's ``current``
    context) and can; else ``None``: the caller runs the session as usual (a selected run's
    span says why it was not profiled; a sampler that raises is reported like a hook)."""
    try:
        if not profiler.selects(span, current):
            return None
    except Exception:
        report_failure("profile_sampler raised")
        return None
    try:
        outcome = profiler.prepare(session, runs, method, args, kwargs)
        if isinstance(outcome, tuple):
            profiler.record_skip(span, outcome)
            return None
        return outcome
    except Exception as exc:
        report_failure("could not profile a run")
        with contextlib.suppress(Exception):
            profiler.record_skip(span, (semconv.SKIP_INTERNAL, repr(exc)))
        return None


def _with_callback(
    args: Args, kwargs: Kwargs, callback: Callable[[Any, Any, str], Any]
) -> tuple[Args, Kwargs]:
    """``run_async``'s arguments with ``callback`` in place of the caller's."""
    if len(args) > 2:
        return (*args[:2], callback, *args[3:]), kwargs
    return args, {**kwargs, "callback": callback}


def _failed(profiler: Profiler, call: ProfiledCall, asynchronous: bool = False) -> None:
    """A profiled run that ORT failed (or otel-ort could not end): its place and gate back."""
    try:
        profiler.failed(call, asynchronous)
    except Exception:
        report_failure("could not drop a failed profiled run")


def _current_facts(span: Span, facts: SessionFacts, session: Any) -> SessionFacts:
    """``facts``, or new ones if ORT rebuilt the session during the run (its EP fallback)."""
    if facts is not UNKNOWN_SESSION and facts.providers_list is not getattr(
        session, "_providers", facts.providers_list
    ):
        return _after_fallback(span, session)
    return facts


def _after_fallback(span: Span, session: Any) -> SessionFacts:
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
    span.set_status(Status(StatusCode.ERROR, clip(description)))
    return error_type


def _call_hook(
    role: str, hook: Callable[[Span, Any, Any], None], span: Span, session: Any, data: Any
) -> None:
    try:
        hook(span, session, data)
    except Exception:
        report_failure(f"{role} raised")

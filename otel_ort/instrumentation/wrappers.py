"""The wrappers: a span and a duration measurement around every ONNX Runtime run.

Per run the wrapper reads the cached session facts, starts one span as a child of the current
context, describes the inputs and calls ``request_hook`` only when the span is recording,
reads the clock around ORT's call, then ends the span and records one histogram value. The
run span is not made the current span: ORT runs the graph in C++, where no Python code would
see it, and attaching a context would double the cost of an unsampled run.

The wrappers are plain functions set on ORT's classes
(:mod:`otel_ort.instrumentation.method_patches`). An unprofiled synchronous run, the common case,
takes one flat path (:meth:`RunTelemetry.run_method`); what is known before the first run (the
tracer's ``start_span``, the histogram's ``record``, the context getter, the hooks) is bound when
``instrument()`` builds the wrapper. Profiled runs (:mod:`otel_ort.instrumentation.profiled_runs`)
and failures (:mod:`otel_ort.instrumentation.run_outcome`) leave that path; a session's
construction is traced in :mod:`otel_ort.instrumentation.session_creation`.

Nothing here may change what ORT returns or raises: otel-ort's own failures are reported
through :mod:`otel_ort.failures` and the run goes ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from time import perf_counter, time_ns
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import context as otel_context
from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.instrumentation.utils import _SUPPRESS_INSTRUMENTATION_KEY_PLAIN
from opentelemetry.metrics import NoOpHistogram
from opentelemetry.trace import NoOpTracer, Span, SpanKind, get_tracer

from otel_ort import semconv
from otel_ort.failures import report_failure
from otel_ort.instrumentation.feeds import describe_feeds
from otel_ort.instrumentation.metrics import Instruments
from otel_ort.instrumentation.options import Options
from otel_ort.instrumentation.profiled_runs import failed, finish_profiled, prepared, run_profiled
from otel_ort.instrumentation.run_outcome import (
    Args,
    Hook,
    Kwargs,
    OutputsOf,
    RunOutcome,
    TracedRun,
    after_fallback,
    call_hook,
)
from otel_ort.instrumentation.session_facts import (
    FACTS_ATTR,
    UNKNOWN_SESSION,
    SessionFacts,
    facts_for,
)
from otel_ort.profiling.session_runs import PROCESS, RUNS_ATTR, SessionRuns, session_runs
from otel_ort.sampling import forced_request
from otel_ort.version import __version__

if TYPE_CHECKING:
    from otel_ort.profiling.profiled_call import ProfiledCall
    from otel_ort.profiling.profiler import Profiler

Method = Callable[..., Any]
FeedsOf = Callable[[Args, Kwargs], Any]

_SPAN_RUN = semconv.SPAN_RUN
_RUN_METHOD = semconv.RUN_METHOD
_RUN_INPUTS = semconv.RUN_INPUTS
_INTERNAL = SpanKind.INTERNAL


def _arg(index: int, name: str) -> FeedsOf:
    """A getter of one argument of a wrapped call, passed by position or by name."""

    def get(args: Args, kwargs: Kwargs) -> Any:
        return args[index] if len(args) > index else kwargs.get(name)

    return get


_FEEDS_ARGUMENT = {"run": (1, "input_feed"), "run_with_ort_values": (1, "input_dict_ort_values")}
"""The run methods whose feeds are one argument: its position and name."""
_INPUT_FEED = _arg(*_FEEDS_ARGUMENT["run"])
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
    "run_with_ort_values": (_arg(*_FEEDS_ARGUMENT["run_with_ort_values"]), _returned),
    "run_with_ortvaluevector": (_vector_feeds, lambda args, kwargs, _: _FETCHES(args, kwargs)),
    "run_with_iobinding": (_IOBINDING, lambda args, kwargs, _: _IOBINDING(args, kwargs)),
}


_METHOD_ONLY: dict[str, dict[str, Any]] = {
    method: {semconv.RUN_METHOD: method} for method in (*RUN_METHODS, "run_async")
}
"""A run span's attributes when its feeds are not a mapping (shared: the SDK copies them)."""


def suppressed(current: Context) -> bool:
    """``not is_instrumentation_enabled()`` on the context read once per run."""
    return bool(
        current.get(_SUPPRESS_INSTRUMENTATION_KEY)
        or current.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN)
    )


def _context_getter() -> Callable[[], Context]:
    """``opentelemetry.context.get_current`` without its two Python calls: the runtime
    context's ``ContextVar.get`` when it is the SDK's usual ``contextvars`` one (chosen once,
    when ``opentelemetry.context`` is imported), else that runtime context's getter."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    if type(runtime) is ContextVarsRuntimeContext and isinstance(variable, ContextVar):
        return cast(Callable[[], Context], variable.get)
    return cast(Callable[[], Context], getattr(runtime, "get_current", otel_context.get_current))


def _facts(session: Any) -> SessionFacts:
    """The session's facts, or a stand-in if otel-ort cannot describe it (the run still gets
    its span)."""
    try:
        return facts_for(session)
    except Exception:
        report_failure("could not describe an ONNX Runtime session")
        return UNKNOWN_SESSION


class RunTelemetry:
    """The tracer, histogram and hooks of one ``instrument()`` call, and the wrappers using them
    (the histogram is ``instruments.run_duration``, made by ``instrument()``)."""

    def __init__(
        self, options: Options, instruments: Instruments, profiler: Profiler | None = None
    ) -> None:
        self.profiler = profiler
        self.tracer = get_tracer("otel_ort", __version__, options.tracer_provider)
        duration = instruments.run_duration
        self._outcome = RunOutcome(duration, options.response_hook)
        self._request_hook = options.request_hook
        self._current = _context_getter()
        self.inert = isinstance(self.tracer, NoOpTracer) and isinstance(duration, NoOpHistogram)
        """No-op tracer and meter providers, or uninstrumented (a bound ``session.run`` taken
        before keeps its wrapper): nothing to record, so the wrappers only delegate."""

    def run_method(self, method: str, original: Method) -> Method:  # noqa: PLR0915 (see below)
        """ORT's synchronous run method ``method`` (a key of ``RUN_METHODS``), traced;
        ``original`` is ORT's function, taking the session first.

        An unprofiled run takes one flat path, each step inlined (a Python call costs about
        0.1 µs there): the facts' cache hit, :meth:`_describe`, the check that no run is forced
        when there is no sampler, ``SessionRuns.enter`` and ``leave``, ``RunOutcome.finish``
        of a success. The context read for the suppression check is given to ``start_span``
        and ``record``, which would each read it again.
        """
        feeds_of, outputs_of = RUN_METHODS[method]
        at, named = _FEEDS_ARGUMENT.get(method, (-1, ""))
        method_only = _METHOD_ONLY[method]
        request_hook = self._request_hook
        current_context = self._current
        start_span = self.tracer.start_span
        outcome = self._outcome
        finish = outcome.finish
        record = outcome.duration.record
        response_hook = outcome.response_hook
        profiler = self.profiler
        asks_sampler = profiler is not None and profiler.asks_sampler

        def traced(session: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: PLR0912, PLR0915
            if self.inert:
                return original(session, *args, **kwargs)
            current = current_context()
            if current.get(_SUPPRESS_INSTRUMENTATION_KEY) or current.get(
                _SUPPRESS_INSTRUMENTATION_KEY_PLAIN
            ):
                return self._untraced(original, session, args, kwargs)
            facts = getattr(session, FACTS_ATTR, None)  # facts_for's cache hit
            if facts is None or facts.providers_list is not getattr(session, "_providers", None):
                facts = _facts(session)
            try:
                span = start_span(
                    _SPAN_RUN, current, kind=_INTERNAL, attributes=facts.run_attributes
                )
                if span.is_recording():  # _describe, inlined
                    feeds = None
                    try:
                        if at < 0:
                            feeds = feeds_of(args, kwargs)
                        else:
                            feeds = args[at] if len(args) > at else kwargs.get(named)
                        if type(feeds) is dict or isinstance(feeds, Mapping):
                            span.set_attributes(
                                {_RUN_METHOD: method, _RUN_INPUTS: describe_feeds(feeds)}
                            )
                        else:
                            span.set_attributes(method_only)
                    except Exception:
                        report_failure("could not describe the inputs of a run")
                    if request_hook is not None:
                        _request(request_hook, span, session, feeds)
            except Exception:  # e.g. a span processor that raises: the run goes on untraced
                report_failure("could not start a run span")
                return self._untraced(original, session, args, kwargs)
            runs = None
            if profiler is not None:
                runs = session.__dict__.get(RUNS_ATTR)  # session_runs' cache hit
                if runs is None or runs.generation != PROCESS.generation:
                    runs = session_runs(session)
                # without a sampler, only a forced run can be selected: profile_next_run's
                # request, or the baggage entry
                if asks_sampler or forced_request() or current.get(_BAGGAGE_KEY):
                    run = TracedRun(span, facts, session, args, kwargs, outputs_of)
                    call = self._profiled_call(profiler, run, current, runs, method)
                    if call is not None:
                        return run_profiled(outcome, original, run, call, profiler)
                runs.count_in()  # SessionRuns.enter, inlined
                if runs.priming:
                    try:  # waits while the session's first profiled run runs alone
                        runs.wait_for_priming()
                    except BaseException as exc:
                        finish(span, facts, session, 0.0, exc)
                        raise
            try:
                start = perf_counter()
                try:
                    result = original(session, *args, **kwargs)
                except BaseException as exc:
                    finish(span, facts, session, perf_counter() - start, exc)
                    raise
                duration = perf_counter() - start
                try:  # RunOutcome.finish of a success
                    if facts.providers_list is not getattr(
                        session, "_providers", facts.providers_list
                    ) and (facts is not UNKNOWN_SESSION):
                        facts = after_fallback(span, session)
                    if response_hook is not None and span.is_recording():
                        outputs = outputs_of(args, kwargs, result)
                        call_hook("response_hook", response_hook, span, session, outputs)
                    record(duration, facts.metric_attributes, current)
                except Exception:
                    report_failure("could not record a run's end")
                finally:
                    try:
                        span.end()
                    except Exception:  # a span processor's on_end
                        report_failure("could not end a run span")
                return result
            finally:
                if runs is not None and profiler is not None:
                    runs.count_out()  # SessionRuns.leave, inlined
                    if runs.priming:
                        runs.wake()
                    if runs.primed and profiler.pool_logs is not None:
                        profiler.pool_logs.ran(runs.nodes)

        return traced

    def _describe(
        self,
        span: Span,
        session: Any,
        method: str,
        feeds_of: FeedsOf,
        args: Args,
        kwargs: Kwargs,
    ) -> None:
        """A recording run span: its method and inputs, then ``request_hook``."""
        feeds = None
        try:
            feeds = feeds_of(args, kwargs)
            if type(feeds) is dict or isinstance(feeds, Mapping):  # ABC check is slow
                span.set_attributes(
                    {semconv.RUN_METHOD: method, semconv.RUN_INPUTS: describe_feeds(feeds)}
                )
            else:
                span.set_attributes(_METHOD_ONLY[method])
        except Exception:
            report_failure("could not describe the inputs of a run")
        if self._request_hook is not None:
            _request(self._request_hook, span, session, feeds)

    def _start(
        self, session: Any, method: str, feeds_of: FeedsOf, args: Args, kwargs: Kwargs
    ) -> tuple[Span, SessionFacts]:
        """Start a run span; describe the inputs and call ``request_hook`` if it is recording."""
        facts = _facts(session)
        span = self.tracer.start_span(_SPAN_RUN, kind=_INTERNAL, attributes=facts.run_attributes)
        if span.is_recording():
            self._describe(span, session, method, feeds_of, args, kwargs)
        return span, facts

    def _untraced(self, original: Method, session: Any, args: Args, kwargs: Kwargs) -> Any:
        """ORT's run, untraced; with profiling on, still among its session's runs in flight:
        a session's first profiled run must not overlap it."""
        if self.profiler is None:
            return original(session, *args, **kwargs)
        runs = session_runs(session)
        runs.enter()
        try:
            return original(session, *args, **kwargs)
        finally:
            runs.leave()

    def _profiled_call(
        self, profiler: Profiler, run: TracedRun, current: Context, runs: SessionRuns, method: str
    ) -> ProfiledCall | None:
        """The run made profiled, if the profiler selects it (in the caller's ``current``
        context) and can; ``None`` otherwise (a selected run's span says why)."""
        try:
            selected = profiler.selects(run.span, current)
        except Exception:
            report_failure("profile_sampler raised")
            return None
        except BaseException as exc:  # KeyboardInterrupt in a sampler
            self._outcome.finish(run.span, run.facts, run.session, 0.0, exc)
            raise
        return prepared(self._outcome, profiler, run, runs, method) if selected else None

    def run_async_method(self, original: Method) -> Method:
        """``run_async``, traced: the span ends when ORT calls the user's callback, which then
        runs in the caller's context. A call without a callable callback goes to ORT untouched,
        so ORT's own argument errors stay as they are."""

        def traced(session: Any, *args: Any, **kwargs: Any) -> Any:
            return self._run_async(original, session, args, kwargs)

        return traced

    def _run_async(self, original: Method, session: Any, args: Args, kwargs: Kwargs) -> Any:
        callback = _CALLBACK(args, kwargs)
        if self.inert or not callable(callback):
            return original(session, *args, **kwargs)
        caller_context = otel_context.get_current()
        if suppressed(caller_context):
            return self._untraced_async(original, session, args, kwargs, callback)
        try:
            span, facts = self._start(session, "run_async", _INPUT_FEED, args, kwargs)
        except Exception:
            report_failure("could not start a run span")
            return self._untraced_async(original, session, args, kwargs, callback)
        run = TracedRun(span, facts, session, args, kwargs, _returned)
        profiler = self.profiler
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
                    self._outcome.finish(span, facts, session, 0.0, exc)
                    raise
        start = [perf_counter()]
        on_done = self._on_done(run, profiler, runs, call, callback, caller_context, start)
        args, kwargs = _with_callback(args, kwargs, on_done)
        try:
            if call is not None:
                call.begin()
                start[0] = perf_counter()
            return original(session, *args, **kwargs)
        except BaseException as exc:
            _ended(profiler, runs, call)
            self._outcome.finish(span, facts, session, perf_counter() - start[0], exc)
            raise

    def _on_done(
        self,
        run: TracedRun,
        profiler: Profiler | None,
        runs: SessionRuns | None,
        call: ProfiledCall | None,
        callback: Callable[[Any, Any, str], Any],
        caller_context: Context,
        start: list[float],
    ) -> Callable[[Any, Any, str], Any]:
        """``run_async``'s callback: end the run (its span, or its profiled run's hand-off),
        then call the user's ``callback`` in the caller's context."""
        outcome = self._outcome

        def on_done(results: Any, user_data: Any, err: str) -> Any:
            try:
                duration = perf_counter() - start[0]
                if call is not None and profiler is not None and not err:
                    end_ns = time_ns()
                    profiled = call.end()
                    finish_profiled(
                        outcome,
                        profiler,
                        run,
                        duration,
                        end_ns,
                        profiled,
                        results,
                        call.runs,
                        asynchronous=True,
                    )
                else:
                    _ended(profiler, runs, call)
                    outcome.finish(run.span, run.facts, run.session, duration, err or None, results)
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
        original: Method,
        session: Any,
        args: Args,
        kwargs: Kwargs,
        callback: Callable[[Any, Any, str], Any],
    ) -> Any:
        """``run_async``, untraced; with profiling on, still among its session's runs in
        flight until ORT calls back."""
        if self.profiler is None:
            return original(session, *args, **kwargs)
        runs = session_runs(session)

        def on_done(results: Any, user_data: Any, err: str) -> Any:
            runs.leave()
            return callback(results, user_data, err)

        args, kwargs = _with_callback(args, kwargs, on_done)
        runs.enter()
        try:
            return original(session, *args, **kwargs)
        except BaseException:
            runs.leave()
            raise


def _request(hook: Hook, span: Span, session: Any, feeds: Any) -> None:
    """``request_hook``; a KeyboardInterrupt in it ends the span (there is no run) and reaches
    the caller."""
    try:
        call_hook("request_hook", hook, span, session, feeds)
    except BaseException:
        span.end()
        raise


def _ended(profiler: Profiler | None, runs: SessionRuns | None, call: ProfiledCall | None) -> None:
    """A ``run_async`` run failed or ended unprofiled: its place in the session's runs."""
    if call is not None and profiler is not None:
        failed(profiler, call, asynchronous=True)
    elif runs is not None:
        runs.leave()


def _with_callback(
    args: Args, kwargs: Kwargs, callback: Callable[[Any, Any, str], Any]
) -> tuple[Args, Kwargs]:
    """``run_async``'s arguments with ``callback`` in place of the caller's."""
    if len(args) > 2:
        return (*args[:2], callback, *args[3:]), kwargs
    return args, {**kwargs, "callback": callback}

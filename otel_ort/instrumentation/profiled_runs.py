"""The request thread's side of a run selected for profiling: made profiled (or why not, on
its span), ORT's run with the profiling ``RunOptions``, then handed to the profiler's worker,
which marks the span, records the duration and ends the span.

Nothing here may change what ORT returns or raises: otel-ort's own failures are reported
through :mod:`otel_ort.failures` and the run goes ahead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from time import perf_counter, time_ns
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from otel_ort import semconv
from otel_ort.failures import report_failure
from otel_ort.instrumentation.run_outcome import RunOutcome, TracedRun, call_hook, current_facts
from otel_ort.instrumentation.session_facts import SessionFacts
from otel_ort.profiling.session_checks import Skipped

if TYPE_CHECKING:
    from otel_ort.profiling.profiled_call import ProfiledCall, ProfiledRun
    from otel_ort.profiling.profiler import Profiler
    from otel_ort.profiling.session_runs import SessionRuns


def prepared(
    outcome: RunOutcome, profiler: Profiler, run: TracedRun, runs: SessionRuns, method: str
) -> ProfiledCall | None:
    """A selected run made profiled; ``None`` if it cannot be (its span says why, and the
    caller runs the session as usual). What the gate raises (KeyboardInterrupt) ends the span
    and reaches the caller."""
    try:
        try:
            made = profiler.prepare(run.session, runs, method, run.args, run.kwargs)
            if isinstance(made, Skipped):
                profiler.record_skip(run.span, made)
                return None
            return made
        except Exception as exc:
            report_failure("could not profile a run")
            with contextlib.suppress(Exception):
                profiler.record_skip(run.span, Skipped(semconv.SKIP_INTERNAL, repr(exc)))
            return None
    except BaseException as exc:  # KeyboardInterrupt at the gate
        outcome.finish(run.span, run.facts, run.session, 0.0, exc)
        raise


def run_profiled(
    outcome: RunOutcome,
    original: Callable[..., Any],
    run: TracedRun,
    call: ProfiledCall,
    profiler: Profiler,
) -> Any:
    """ORT's own run (``original``, taking the session first) with the profiling
    ``RunOptions``; the worker ends its span."""
    start = perf_counter()
    try:
        call.begin()
        start = perf_counter()
        result = original(run.session, *call.args, **call.kwargs)
    except BaseException as exc:
        failed(profiler, call)
        outcome.finish(run.span, run.facts, run.session, perf_counter() - start, exc)
        raise
    duration = perf_counter() - start
    end_ns = time_ns()
    outputs = run.outputs_of(run.args, run.kwargs, result) if outcome.response_hook else None
    if profiler.pool_logs is not None:
        profiler.pool_logs.cleared()
    try:
        profiled = call.end()
    except Exception:  # otel-ort's: ORT's result is returned all the same
        report_failure("could not end a profiled run")
        failed(profiler, call)
        outcome.finish(run.span, run.facts, run.session, duration, None, outputs)
        return result
    finish_profiled(outcome, profiler, run, duration, end_ns, profiled, outputs, call.runs)
    return result


def finish_profiled(
    outcome: RunOutcome,
    profiler: Profiler,
    run: TracedRun,
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
        facts = current_facts(span, facts, run.session)
        if outcome.response_hook is not None and span.is_recording():
            call_hook("response_hook", outcome.response_hook, span, run.session, outputs)
    except Exception:
        report_failure("could not record a run's end")
    finally:
        measured = partial(_measured, outcome, span, facts, duration, profiled)
        try:
            profiler.finish(span, end_ns, profiled, facts, runs, measured, asynchronous)
        except Exception:
            report_failure("could not hand a profiled run over")
            span.end(end_ns)


def _measured(
    outcome: RunOutcome, span: Span, facts: SessionFacts, duration: float, profiled: ProfiledRun
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
        outcome.duration.record(duration, {**facts.metric_attributes, semconv.RUN_PROFILED: True})
    except Exception:
        report_failure("could not mark a profiled run span")


def failed(profiler: Profiler, call: ProfiledCall, asynchronous: bool = False) -> None:
    """A profiled run that ORT failed (or otel-ort could not end): its place and gate back."""
    try:
        profiler.failed(call, asynchronous)
    except Exception:
        report_failure("could not drop a failed profiled run")

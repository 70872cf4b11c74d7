"""The run path made cheap: ORT's methods replaced by plain functions, each session's runs in
flight counted without a lock, the caller's context read once. Real ORT sessions, real
threads."""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import wrapt
from onnxruntime.capi import onnxruntime_inference_collection as collection
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

from otel_ort import OrtInstrumentor, semconv
from otel_ort.instrumentation.method_patches import patch
from otel_ort.instrumentation.wrappers import RUN_METHODS, _context_getter
from otel_ort.profiling import session_runs as session_runs_module
from otel_ort.profiling.session_runs import SessionRuns, session_runs
from tests.conftest import Telemetry, attrs, instrumentation, run_threads

X = {"x": np.arange(4 * 32, dtype=np.float32).reshape(4, 32) / 100}
RUNS_CLASSES = [SessionRuns, session_runs_module._LockedSessionRuns]
"""With the GIL (lock-free counts) and without (counts under the lock): both are tested."""


def cpu_session(model: Path) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switch every few microseconds: the counts' races get their chances."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.fixture
def ort_run_restored() -> Iterator[Any]:
    """ORT's own ``Session.run``, put back after a test that lets another wrapper on it."""
    original = collection.Session.__dict__["run"]
    try:
        yield original
    finally:
        collection.Session.run = original


def test_replaced_methods_look_like_orts(telemetry: Telemetry, mlp_path: Path) -> None:
    names = [*RUN_METHODS, "run_async"]
    originals = {name: collection.Session.__dict__[name] for name in names}
    init = collection.InferenceSession.__dict__["__init__"]
    with instrumentation(**telemetry.providers):
        for name, original in originals.items():
            replaced = collection.Session.__dict__[name]
            assert replaced is not original and replaced.__wrapped__ is original
            assert (replaced.__name__, replaced.__doc__) == (original.__name__, original.__doc__)
            assert inspect.signature(replaced) == inspect.signature(original)
        assert inspect.unwrap(collection.InferenceSession.__init__) is init
        cpu_session(mlp_path).run(None, X)
    assert {name: collection.Session.__dict__[name] for name in names} == originals
    assert collection.InferenceSession.__dict__["__init__"] is init
    assert [span.name for span in telemetry.spans()] == [
        semconv.SPAN_SESSION_CREATE,
        semconv.SPAN_RUN,
    ]


def test_a_method_the_class_lacks_is_not_patched() -> None:
    class Older:
        def run(self) -> str:
            return "run"

    assert patch(Older, "run_async", lambda original: original) is None
    assert "run_async" not in Older.__dict__


def test_a_wrapper_put_on_top_after_instrument_stays_after_uninstrument(
    telemetry: Telemetry, mlp_path: Path, ort_run_restored: Any
) -> None:
    """Another library wraps ``Session.run`` (wrapt) after ``instrument()``: ``uninstrument()``
    leaves its wrapper in place, and otel-ort's under it only delegates."""
    calls: list[Any] = []

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append(instance)
        return wrapped(*args, **kwargs)

    instrumentor = OrtInstrumentor()
    instrumentor.instrument(**telemetry.providers)
    try:
        wrapt.wrap_function_wrapper(collection.Session, "run", theirs)
        session = cpu_session(mlp_path)
        expected = session.run(None, X)
    finally:
        instrumentor.uninstrument()
    assert isinstance(collection.Session.__dict__["run"], wrapt.FunctionWrapper)
    outputs = session.run(None, X)
    assert np.array_equal(outputs[0], expected[0])
    assert calls == [session, session]
    assert len(telemetry.spans(semconv.SPAN_RUN)) == 1  # none after uninstrument


def test_a_wrapper_made_before_instrument_is_called_with_its_session(
    telemetry: Telemetry, mlp_path: Path, ort_run_restored: Any
) -> None:
    """A class attribute that is not a plain function (another library's wrapt wrapper) is
    called the way attribute lookup would: bound to the session."""
    calls: list[Any] = []

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append(instance)
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(collection.Session, "run", theirs)
    theirs_on_class = collection.Session.__dict__["run"]
    with instrumentation(**telemetry.providers):
        session = cpu_session(mlp_path)
        outputs = session.run(None, X)
    assert outputs[0].shape == (4, 32)
    assert calls == [session]
    assert len(telemetry.spans(semconv.SPAN_RUN)) == 1
    assert collection.Session.__dict__["run"] is theirs_on_class


@pytest.mark.parametrize("runs_class", RUNS_CLASSES)
def test_counts_stay_exact_under_concurrent_runs(
    runs_class: type[SessionRuns], switching_often: None
) -> None:
    runs = runs_class()
    threads, each = 8, 5000

    def work() -> None:
        for _ in range(each):
            runs.enter()
            runs.leave()

    run_threads([threading.Thread(target=work) for _ in range(threads)])
    assert (runs.in_flight, runs.started) == (0, threads * each)


@pytest.mark.parametrize("runs_class", RUNS_CLASSES)
def test_a_first_profiled_run_never_overlaps_a_run_of_its_session(
    runs_class: type[SessionRuns], switching_often: None
) -> None:
    """Runs keep coming on four threads while a first profiled run begins: none of them is
    between ``enter`` and ``leave`` while it runs, and none is lost or counted twice."""
    for _ in range(10):
        _first_profiled_run_among_runs(runs_class())


def _first_profiled_run_among_runs(runs: SessionRuns) -> None:
    active, lock, stop = [0], threading.Lock(), threading.Event()
    overlaps: list[int] = []
    overlapping: list[int] = []

    def run() -> None:
        while not stop.is_set():
            runs.enter()
            with lock:
                active[0] += 1
            time.sleep(0)  # ORT's run
            with lock:
                active[0] -= 1
            runs.leave()

    def first_profiled() -> None:
        window = runs.begin_profiled(timeout=10)
        assert window is not None and window.first
        for _ in range(200):
            with lock:
                if active[0]:
                    overlaps.append(active[0])
            time.sleep(0)
        overlapping.append(runs.end_profiled(window))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.01)
    profiled = threading.Thread(target=first_profiled)
    profiled.start()
    profiled.join(timeout=30)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not profiled.is_alive() and not any(thread.is_alive() for thread in threads)
    assert overlaps == [] and overlapping == [0]
    assert runs.primed and runs.in_flight == 0


@pytest.mark.parametrize("runs_class", RUNS_CLASSES)
def test_overlapping_runs_are_counted_after_priming(runs_class: type[SessionRuns]) -> None:
    runs = runs_class()
    window = runs.begin_profiled(timeout=1)
    assert window is not None and window.first
    assert runs.end_profiled(window) == 0
    runs.enter()  # in flight when the next profiled run begins
    window = runs.begin_profiled(timeout=1)
    assert window is not None and not window.first
    runs.enter()  # begins and ends during it
    runs.leave()
    runs.leave()
    assert runs.end_profiled(window) == 2
    assert (runs.in_flight, runs.started) == (0, 4)


@pytest.mark.parametrize("runs_class", RUNS_CLASSES)
def test_a_run_interrupted_while_held_is_counted_out(runs_class: type[SessionRuns]) -> None:
    """A KeyboardInterrupt while a run waits for the first profiled run: that run does not
    happen, so it leaves no count behind (the first profiled run would wait for it)."""
    main = threading.main_thread()

    class InterruptedInMain(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            if threading.current_thread() is main:
                raise KeyboardInterrupt
            return super().wait(timeout)

    runs = runs_class()
    runs._changed = InterruptedInMain(runs._lock)
    in_flight, ended = threading.Event(), threading.Event()

    def earlier_run() -> None:
        runs.enter()
        in_flight.set()
        ended.wait(timeout=30)
        runs.leave()

    windows: list[Any] = []

    def first_profiled() -> None:
        window = runs.begin_profiled(timeout=30)
        windows.append(window)
        if window is not None:
            runs.end_profiled(window)

    earlier = threading.Thread(target=earlier_run)
    earlier.start()
    assert in_flight.wait(timeout=30)
    profiled = threading.Thread(target=first_profiled)
    profiled.start()
    deadline = time.monotonic() + 30
    while not runs.priming and time.monotonic() < deadline:
        time.sleep(0.001)
    assert runs.priming
    with pytest.raises(KeyboardInterrupt):
        runs.enter()
    assert runs.in_flight == 1  # the earlier run only
    ended.set()
    earlier.join(timeout=30)
    profiled.join(timeout=30)
    assert windows and windows[0] is not None and windows[0].first
    assert runs.in_flight == 0 and runs.primed


def test_a_ctrl_c_in_the_response_hook_leaves_no_run_in_flight(
    telemetry: Telemetry, mlp_path: Path
) -> None:
    def interrupted(span: Any, session: Any, outputs: Any) -> None:
        raise KeyboardInterrupt

    with instrumentation(**telemetry.providers, response_hook=interrupted):
        session = cpu_session(mlp_path)
        with pytest.raises(KeyboardInterrupt):
            session.run(None, X)
        assert session_runs(session).in_flight == 0
        assert session_runs(session).started == 1
    (span,) = telemetry.spans(semconv.SPAN_RUN)
    assert span.end_time is not None


def test_baggage_without_the_profile_entry_leaves_the_run_unprofiled(
    telemetry: Telemetry, mlp_path: Path, tmp_path: Path
) -> None:
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = cpu_session(mlp_path)
        token = otel_context.attach(baggage.set_baggage("tenant", "a"))
        try:
            session.run(None, X)
        finally:
            otel_context.detach(token)
    (span,) = telemetry.spans(semconv.SPAN_RUN)
    assert attrs(span)[semconv.RUN_PROFILED] is False
    assert semconv.PROFILE_SKIP_REASON not in attrs(span)


def test_the_run_span_and_its_duration_use_the_callers_context(
    telemetry: Telemetry, mlp_path: Path
) -> None:
    """The context is read once and given to both SDK calls: the span's parent is the
    caller's span, and the duration's exemplar (trace-based) carries its trace."""
    tracer = telemetry.tracer_provider.get_tracer("test")
    with instrumentation(**telemetry.providers):
        session = cpu_session(mlp_path)
        with tracer.start_as_current_span("request") as request:
            session.run(None, X)
    (span,) = telemetry.spans(semconv.SPAN_RUN)
    assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    (point,) = telemetry.points(semconv.METRIC_RUN_DURATION)
    assert [exemplar.trace_id for exemplar in point.exemplars] == [
        request.get_span_context().trace_id
    ]


def test_the_context_getter_reads_the_current_context() -> None:
    current = _context_getter()
    assert current() is otel_context.get_current()
    token = otel_context.attach(trace.set_span_in_context(trace.INVALID_SPAN))
    try:
        assert current() is otel_context.get_current()
    finally:
        otel_context.detach(token)

"""Run spans and metrics from real ORT sessions on real models."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi import onnxruntime_inference_collection as collection
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument, NoSuchFile
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from otel_ort import OrtInstrumentor, semconv
from otel_ort._util.text_limits import MAX_TEXT
from otel_ort.failures import failure_counts
from otel_ort.instrumentation import session_facts
from tests.conftest import Telemetry, attrs, instrumentation, run_threads
from tests.helpers.models import numeric_types_model, string_model

X = np.arange(4 * 32, dtype=np.float32).reshape(4, 32) / 100


def cpu_session(model: Path | bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def test_run_span_attributes(instrumented: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    session.run(None, {"x": X})

    (span,) = instrumented.spans(semconv.SPAN_RUN)
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes or {})
    assert attributes[semconv.MODEL_PATH] == str(mlp_path)
    assert attributes[semconv.MODEL_GRAPH_NAME] == "mlp_2x32"
    assert attributes[semconv.MODEL_PRODUCER] == "otel-ort"
    assert attributes[semconv.SESSION_PROVIDERS] == ("CPUExecutionProvider",)
    assert attributes[semconv.RUN_INPUTS] == ("x:float32[4,32]",)
    assert attributes[semconv.RUN_METHOD] == "run"
    assert attributes[semconv.RUN_PROFILED] is False


def test_run_span_texts_are_bounded(instrumented: Telemetry, tmp_path: Path) -> None:
    """A model's path and metadata and an input's name are as long as the user makes them;
    the SDK bounds none by default."""
    deep = tmp_path.joinpath(*["d" * 200] * 8)  # a path of over 1,600 characters
    deep.mkdir(parents=True)
    model = deep / "m.onnx"
    proto = onnx.load_from_string(string_model())
    proto.graph.name = "g" * 5000
    model.write_bytes(proto.SerializeToString())
    session = cpu_session(model)
    with pytest.raises(ValueError, match="missing from input feed"):  # ORT's own check
        session.run(None, {"n" * 5000: np.array(["a"], dtype=object)})
    (span,) = instrumented.spans(semconv.SPAN_RUN)
    attributes = attrs(span)
    for key in (semconv.MODEL_PATH, semconv.MODEL_GRAPH_NAME):
        value = attributes[key]
        assert isinstance(value, str) and len(value) == MAX_TEXT and value.endswith("…")
    assert [len(text) for text in attributes[semconv.RUN_INPUTS]] == [MAX_TEXT]
    assert len(span.status.description or "") == MAX_TEXT  # ORT's message names the input


def test_run_span_is_child_of_current_span(instrumented: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    tracer = instrumented.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        session.run(None, {"x": X})
    (span,) = instrumented.spans(semconv.SPAN_RUN)
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id
    assert span.context.trace_id == request.get_span_context().trace_id


def test_session_span_and_facts_computed_once(
    instrumented: Telemetry, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collected: list[object] = []
    collect = session_facts._collect

    def counting_collect(
        session: object, previous: session_facts.SessionFacts | None, model: str
    ) -> session_facts.SessionFacts:
        collected.append(session)
        return collect(session, previous, model)

    monkeypatch.setattr(session_facts, "_collect", counting_collect)
    session = cpu_session(mlp_path)
    for _ in range(3):
        session.run(None, {"x": X})
    (created,) = instrumented.spans(semconv.SPAN_SESSION_CREATE)
    assert attrs(created)[semconv.MODEL_PATH] == str(mlp_path)
    assert attrs(created)[semconv.ONNXRUNTIME_VERSION] == ort.__version__
    assert attrs(created)[semconv.SESSION_GRAPH_OPTIMIZATION_LEVEL] == "ORT_ENABLE_ALL"
    runs = instrumented.spans(semconv.SPAN_RUN)
    session_ids = {attrs(run)[semconv.SESSION_ID] for run in runs}
    assert session_ids == {attrs(created)[semconv.SESSION_ID]}
    assert collected == [session]  # once, at construction; never per run


def test_session_creation_failure_is_recorded_and_reraised(
    instrumented: Telemetry, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.onnx"
    with pytest.raises(NoSuchFile) as raised:
        cpu_session(missing)
    (created,) = instrumented.spans(semconv.SPAN_SESSION_CREATE)
    assert created.status.status_code is StatusCode.ERROR
    assert attrs(created)[semconv.ERROR_TYPE] == "NoSuchFile"
    assert attrs(created)[semconv.MODEL_PATH] == str(missing)
    assert str(missing) in str(raised.value)


def test_a_model_given_as_bytes_is_hashed_holding_up_no_other_session(
    instrumented: Telemetry, mlp_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hashing costs about 2 ms per MB: not under the lock every session's first run takes."""
    label = session_facts.model_label
    held: list[bool] = []

    def hashing(session: object) -> str:
        held.append(session_facts._collect_lock.locked())
        return label(session)

    monkeypatch.setattr(session_facts, "model_label", hashing)
    cpu_session(mlp_bytes).run(None, {"x": X})
    assert held == [False]


def test_model_given_as_bytes_gets_a_stable_label(
    instrumented: Telemetry, mlp_bytes: bytes
) -> None:
    for _ in range(2):
        cpu_session(mlp_bytes).run(None, {"x": X})
    labels = {attrs(span)[semconv.MODEL_PATH] for span in instrumented.spans(semconv.SPAN_RUN)}
    (label,) = labels
    assert label.startswith("bytes:sha256:")


def test_sessions_created_before_instrument_are_covered(
    telemetry: Telemetry, mlp_path: Path
) -> None:
    session = cpu_session(mlp_path)
    with instrumentation(**telemetry.providers):
        session.run(None, {"x": X})
    (span,) = telemetry.spans(semconv.SPAN_RUN)
    assert attrs(span)[semconv.MODEL_PATH] == str(mlp_path)
    assert telemetry.spans(semconv.SPAN_SESSION_CREATE) == []


def test_failing_run_reraises_ort_exception_unchanged(
    instrumented: Telemetry, mlp_path: Path
) -> None:
    session = cpu_session(mlp_path)
    bad = {"x": np.zeros((2, 5), np.float32)}
    with pytest.raises(InvalidArgument) as instrumented_error:
        session.run(None, bad)
    OrtInstrumentor().uninstrument()
    try:
        with pytest.raises(InvalidArgument) as bare_error:
            session.run(None, bad)
    finally:
        OrtInstrumentor().instrument(**instrumented.providers)
    assert type(instrumented_error.value) is type(bare_error.value)
    assert str(instrumented_error.value) == str(bare_error.value)

    (span,) = instrumented.spans(semconv.SPAN_RUN)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "InvalidArgument"
    (event,) = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.message"] == str(bare_error.value)


MIXED_FEED: dict[str, np.ndarray] = {
    "x": np.array([-1.5, 0.0, 2.25], np.float32),
    "i": np.array([1, -2, 3], np.int64),
    "b": np.array([True, False, True]),
    "h": np.array([-1.0, 0.5, 65504.0], np.float16),
}
STRING_FEED: dict[str, np.ndarray] = {"s": np.array(["a", "bé", ""], dtype=object)}


def outputs_by_every_method(session: ort.InferenceSession) -> list[list[np.ndarray]]:
    """Outputs of run, run_with_ort_values, run_with_iobinding, run_with_ortvaluevector,
    run_async (numeric model), then run and run_async on the string model."""
    feed = MIXED_FEED
    results = [session.run(None, feed)]
    ort_values = {name: ort.OrtValue.ortvalue_from_numpy(value) for name, value in feed.items()}
    results.append([v.numpy() for v in session.run_with_ort_values(None, ort_values)])

    binding = session.io_binding()
    for name, value in feed.items():
        binding.bind_cpu_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name)
    session.run_with_iobinding(binding)
    results.append(binding.copy_outputs_to_cpu())

    names = [o.name for o in session.get_outputs()]
    feeds = collection.C.OrtValueVector()
    for value in ort_values.values():
        feeds.push_back(value._ortvalue)
    fetches = collection.C.OrtValueVector()
    cpu = collection.C.OrtDevice(
        collection.C.OrtDevice.cpu(), collection.C.OrtDevice.default_memory(), 0
    )
    session.run_with_ortvaluevector(
        ort.RunOptions(), list(feed), feeds, names, fetches, [cpu] * len(names)
    )
    results.append([fetches[k].numpy() for k in range(len(names))])

    results.append(run_async_and_wait(session, feed))
    strings = cpu_session(string_model())
    results += [strings.run(None, STRING_FEED), run_async_and_wait(strings, STRING_FEED)]
    return results


def run_async_and_wait(
    session: ort.InferenceSession, feed: dict[str, np.ndarray]
) -> list[np.ndarray]:
    done = threading.Event()
    async_results: list[list[np.ndarray]] = []

    def callback(outputs: list[np.ndarray], user_data: object, err: str) -> None:
        assert not err, err
        async_results.append(outputs)
        done.set()

    session.run_async(None, feed, callback, None)
    assert done.wait(10)
    return async_results[0]


def assert_bitwise_equal(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for left, right in zip(a, b, strict=True):
        assert left.dtype == right.dtype and left.shape == right.shape
        if left.dtype == object:
            assert left.tolist() == right.tolist()
        else:
            assert left.tobytes() == right.tobytes()


def test_outputs_bitwise_identical_for_every_run_method(telemetry: Telemetry) -> None:
    session = cpu_session(numeric_types_model())
    bare = outputs_by_every_method(session)
    with instrumentation(**telemetry.providers):
        traced = outputs_by_every_method(session)
    for bare_outputs, traced_outputs in zip(bare, traced, strict=True):
        assert_bitwise_equal(bare_outputs, traced_outputs)
    spans = telemetry.spans(semconv.SPAN_RUN)
    methods = [attrs(span)[semconv.RUN_METHOD] for span in spans]
    assert methods == [
        "run",
        "run_with_ort_values",
        "run_with_iobinding",
        "run_with_ortvaluevector",
        "run_async",
        "run",
        "run_async",
    ]
    inputs = [attrs(span).get(semconv.RUN_INPUTS) for span in spans]
    numeric = ("x:float32[3]", "i:int64[3]", "b:bool[3]", "h:float16[3]")
    assert inputs == [numeric, numeric, None, numeric, numeric, ("s:object[3]",), ("s:object[3]",)]
    # an IOBinding's inputs cannot be read without copying them: no inputs attribute


def test_run_async_span_ends_in_callback_and_keeps_caller_context(
    instrumented: Telemetry, mlp_path: Path
) -> None:
    session = cpu_session(mlp_path)
    tracer = instrumented.tracer_provider.get_tracer("test")
    seen: dict[str, object] = {}
    done = threading.Event()

    def callback(outputs: list[np.ndarray], user_data: object, err: str) -> None:
        seen["span"] = trace.get_current_span().get_span_context().span_id
        seen["ended_before_callback"] = len(instrumented.spans(semconv.SPAN_RUN)) == 1
        seen["user_data"] = user_data
        done.set()

    with tracer.start_as_current_span("request") as request:
        session.run_async(None, {"x": X}, callback, "payload")
    assert done.wait(10)
    assert seen == {
        "span": request.get_span_context().span_id,
        "ended_before_callback": True,
        "user_data": "payload",
    }


def test_run_async_failure_reported_by_callback(instrumented: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    errors: list[str] = []
    done = threading.Event()

    def callback(outputs: list[np.ndarray], user_data: object, err: str) -> None:
        errors.append(err)
        done.set()

    session.run_async(None, {"x": np.zeros((1, 2, 3), np.float32)}, callback, None)
    assert done.wait(10)
    (span,) = instrumented.spans(semconv.SPAN_RUN)
    assert errors and errors[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == errors[0]
    assert attrs(span)[semconv.ERROR_TYPE] == "_OTHER"
    (point,) = instrumented.points(semconv.METRIC_RUN_DURATION)
    assert point.attributes[semconv.ERROR_TYPE] == "_OTHER" and point.count == 1


def test_instrument_uninstrument_instrument(telemetry: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    instrumentor = OrtInstrumentor()
    providers = telemetry.providers
    instrumentor.instrument(**providers)
    session.run(None, {"x": X})
    bound_run = session.run  # a bound method taken while instrumented keeps its wrapper
    instrumentor.uninstrument()
    assert not hasattr(collection.Session.run, "__wrapped__")
    session.run(None, {"x": X})
    bound_run(None, {"x": X})
    assert len(telemetry.spans(semconv.SPAN_RUN)) == 1  # nothing after uninstrument
    (point,) = telemetry.points(semconv.METRIC_RUN_DURATION)
    assert point.count == 1

    instrumentor.instrument(**providers)
    try:
        assert not hasattr(collection.Session.run.__wrapped__, "__wrapped__")  # wrapped once
        session.run(None, {"x": X})
    finally:
        instrumentor.uninstrument()
    assert len(telemetry.spans(semconv.SPAN_RUN)) == 2


def test_suppress_instrumentation_is_honoured(instrumented: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    with suppress_instrumentation():
        session.run(None, {"x": X})
        cpu_session(mlp_path)
    assert [span.name for span in instrumented.spans()] == [semconv.SPAN_SESSION_CREATE]
    assert instrumented.points(semconv.METRIC_RUN_DURATION) == []


def test_hooks_receive_span_session_feeds_and_outputs(telemetry: Telemetry, mlp_path: Path) -> None:
    calls: list[tuple[str, object, object, object]] = []

    def request_hook(span, session, feeds) -> None:
        calls.append(("request", span, session, feeds))
        span.set_attribute("app.tenant", "blue")

    def response_hook(span, session, outputs) -> None:
        calls.append(("response", span, session, outputs))

    hooks = {"request_hook": request_hook, "response_hook": response_hook}
    with instrumentation(**telemetry.providers, **hooks):
        session = cpu_session(mlp_path)
        feed = {"x": X}
        outputs = session.run(None, feed)
    (span,) = telemetry.spans(semconv.SPAN_RUN)
    assert attrs(span)["app.tenant"] == "blue"
    assert [c[0] for c in calls] == ["request", "response"]
    assert calls[0][2] is session and calls[0][3] is feed
    assert calls[1][2] is session and calls[1][3] is outputs


def test_failing_hooks_never_break_the_run(telemetry: Telemetry, mlp_path: Path) -> None:
    def broken(span, session, data) -> None:
        raise RuntimeError("hook bug")

    before = failure_counts()
    with instrumentation(**telemetry.providers, request_hook=broken, response_hook=broken):
        outputs = cpu_session(mlp_path).run(None, {"x": X})
    assert outputs[0].shape == (4, 32)
    assert len(telemetry.spans(semconv.SPAN_RUN)) == 1
    after = failure_counts()
    for hook in ("request_hook raised", "response_hook raised"):
        assert after[hook] == before.get(hook, 0) + 1


@pytest.mark.parametrize("hook", ["request_hook", "response_hook"])
def test_ctrl_c_in_a_hook_reaches_the_caller_and_ends_the_span(
    telemetry: Telemetry, mlp_path: Path, hook: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt is the user's, not a hook bug: it goes on, and the span still ends;
    from ``run_async``'s response_hook (on ORT's thread, which reports it), the callback is
    still called."""

    def interrupted(span, session, data) -> None:
        raise KeyboardInterrupt

    started: list[int] = []

    class Starts(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if span.name == semconv.SPAN_RUN:
                started.append(span.context.span_id)

    telemetry.tracer_provider.add_span_processor(Starts())
    with instrumentation(**telemetry.providers, **{hook: interrupted}):
        session = cpu_session(mlp_path)
        with pytest.raises(KeyboardInterrupt):
            session.run(None, {"x": X})
        if hook == "response_hook":
            reported: queue.Queue[Any] = queue.Queue()
            monkeypatch.setattr(sys, "unraisablehook", reported.put)
            run_async_and_wait(session, {"x": X})
            assert isinstance(reported.get(timeout=10).exc_value, KeyboardInterrupt)
    assert len(started) == 2 if hook == "response_hook" else 1
    assert [span.context.span_id for span in telemetry.spans(semconv.SPAN_RUN)] == started


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"tracer_provder": None}, ValueError, "unknown option(s) 'tracer_provder'"),
        ({"tracer_provider": "tp"}, TypeError, "tracer_provider=...) must be an opentelemetry"),
        ({"meter_provider": object()}, TypeError, "meter_provider=...) must be an opentelemetry"),
        ({"request_hook": 3}, TypeError, "request_hook=...) must be a callable"),
        ({"response_hook": "f"}, TypeError, "response_hook=...) must be a callable"),
        ({"perf_events": ["task-clock", 5]}, TypeError, "perf_events=...) must list event names"),
    ],
)
def test_bad_options_fail_at_instrument(
    options: dict[str, object], error: type, message: str
) -> None:
    instrumentor = OrtInstrumentor()
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        instrumentor.instrument(**options)
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert not hasattr(collection.Session.run, "__wrapped__")


class CountingArray(np.ndarray):
    """A real ndarray (ORT reads its buffer) that counts reads of ``.dtype`` from Python."""

    reads = 0

    @property
    def dtype(self) -> np.dtype:
        CountingArray.reads += 1
        return super().dtype


def test_unsampled_runs_skip_attribute_work(mlp_path: Path) -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    feed = {"x": X.view(CountingArray)}
    hook_calls = []
    counted = {}
    for name, sampler in (("off", ALWAYS_OFF), ("on", ALWAYS_ON)):
        CountingArray.reads = 0
        with instrumentation(
            tracer_provider=TracerProvider(sampler=sampler),
            request_hook=lambda *args: hook_calls.append(args),
        ):
            outputs = cpu_session(mlp_path).run(None, feed)
        counted[name] = CountingArray.reads
        assert outputs[0].shape == (4, 32)
    assert counted == {"off": 0, "on": 1}  # the check can fail: sampled runs do read it
    assert len(hook_calls) == 1


def test_noop_providers_only_delegate(mlp_path: Path) -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    noop = {"tracer_provider": NoOpTracerProvider(), "meter_provider": NoOpMeterProvider()}
    with instrumentation(**noop):
        session = cpu_session(mlp_path)
        assert session.run(None, {"x": X})[0].shape == (4, 32)
    assert "_otel_ort_facts" not in session.__dict__


def test_duration_histogram(instrumented: Telemetry, mlp_path: Path) -> None:
    session = cpu_session(mlp_path)
    for _ in range(3):
        session.run(None, {"x": X})
    with pytest.raises(InvalidArgument):
        session.run(None, {"x": np.zeros(3, np.float32)})
    points = {
        attrs(point).get(semconv.ERROR_TYPE): point
        for point in instrumented.points(semconv.METRIC_RUN_DURATION)
    }
    assert set(points) == {None, "InvalidArgument"}
    ok = points[None]
    assert ok.count == 3 and 0 < ok.sum < 10
    assert dict(ok.attributes) == {
        semconv.MODEL_PATH: str(mlp_path),
        semconv.SESSION_PROVIDER: "CPUExecutionProvider",
        semconv.RUN_PROFILED: False,
    }
    assert points["InvalidArgument"].count == 1
    assert ok.explicit_bounds[0] == 0.00005  # seconds, not the SDK's millisecond defaults


def test_a_session_otel_ort_cannot_describe_still_gets_its_spans_and_durations(
    instrumented: Telemetry, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("otel-ort bug")

    monkeypatch.setattr(session_facts, "_collect", broken)
    session = cpu_session(mlp_path)
    for _ in range(2):
        session.run(None, {"x": X})
    spans = instrumented.spans(semconv.SPAN_RUN)
    assert len(spans) == 2 and all(attrs(s)[semconv.MODEL_PATH] == "unknown" for s in spans)
    (point,) = instrumented.points(semconv.METRIC_RUN_DURATION)
    assert point.count == 2


def test_a_second_instrument_reads_no_options(tmp_path: Path) -> None:
    """It only warns (the base class's), so a profile_dir it names is neither made nor
    checked, and a bad option does not raise."""
    with instrumentation():
        OrtInstrumentor().instrument(profile_dir=str(tmp_path / "new"), profile_mode="bad")
    assert not (tmp_path / "new").exists()


class ExplodingProcessor(SpanProcessor):
    """A span processor with a bug: what a user's telemetry stack might do to us."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("processor bug on start")

    def on_end(self, span: object) -> None:
        raise RuntimeError("processor bug on end")


@pytest.mark.parametrize("failing", ["on_start", "on_end"])
def test_a_broken_telemetry_pipeline_never_changes_run_results(
    failing: str,
    mlp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    telemetry: Telemetry,
) -> None:
    """... nor loses the run's duration, when only ending its span fails."""
    if failing == "on_end":
        monkeypatch.setattr(ExplodingProcessor, "on_start", SpanProcessor.on_start)
    telemetry.tracer_provider.add_span_processor(ExplodingProcessor())
    session = cpu_session(mlp_path)
    expected = session.run(None, {"x": X})
    with pytest.raises(InvalidArgument) as bare_error:
        session.run(None, {"x": np.zeros(3, np.float32)})

    with instrumentation(**telemetry.providers):
        outputs = session.run(None, {"x": X})
        with pytest.raises(InvalidArgument) as error:
            session.run(None, {"x": np.zeros(3, np.float32)})
        async_outputs = run_async_and_wait(session, {"x": X})
    assert_bitwise_equal(outputs, expected)
    assert_bitwise_equal(async_outputs, expected)
    assert str(error.value) == str(bare_error.value)
    if failing == "on_end":
        assert sum(p.count for p in telemetry.points(semconv.METRIC_RUN_DURATION)) == 3
        assert "on an ended span" not in caplog.text  # each span is ended once


def test_a_broken_telemetry_pipeline_never_changes_session_construction(tmp_path: Path) -> None:
    provider = TracerProvider()
    provider.add_span_processor(ExplodingProcessor())
    with pytest.raises(NoSuchFile) as bare_error:
        cpu_session(tmp_path / "missing.onnx")
    with instrumentation(tracer_provider=provider):
        session = cpu_session(mixed := numeric_types_model())
        with pytest.raises(NoSuchFile) as error:
            cpu_session(tmp_path / "missing.onnx")
    assert session.get_inputs()[0].name == "x" and mixed
    assert str(error.value) == str(bare_error.value)


class RaisingCSession:
    """ORT's C++ session with its `run` replaced: raises what the test chooses, once."""

    def __init__(self, real: object, error: BaseException) -> None:
        self._real, self._error = real, error

    def run(self, *args: object) -> object:
        raise self._error

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def test_the_very_exception_object_ort_raised_propagates(
    instrumented: Telemetry, mlp_path: Path
) -> None:
    session = cpu_session(mlp_path)
    sentinel = InvalidArgument("sentinel from ORT")
    session._sess = RaisingCSession(session._sess, sentinel)
    with pytest.raises(InvalidArgument) as raised:
        session.run(None, {"x": X})
    assert raised.value is sentinel


def test_ep_fallback_during_a_run_is_recorded(
    instrumented: Telemetry, mlp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = cpu_session(mlp_path)
    expected = session.run(None, {"x": X})
    session._sess = RaisingCSession(session._sess, collection.C.EPFail("injected EP failure"))
    outputs = session.run(None, {"x": X})  # ORT's own fallback: rebuild the session, run again
    assert "Falling back" in capsys.readouterr().out
    assert_bitwise_equal(outputs, expected)
    before, fallback = instrumented.spans(semconv.SPAN_RUN)
    assert semconv.RUN_PROVIDER_FALLBACK not in attrs(before)
    assert attrs(fallback)[semconv.RUN_PROVIDER_FALLBACK] is True
    assert attrs(fallback)[semconv.SESSION_PROVIDERS] == ("CPUExecutionProvider",)
    assert attrs(fallback)[semconv.SESSION_ID] == attrs(before)[semconv.SESSION_ID]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # ORT's thread
@pytest.mark.parametrize("callback", ["missing", None, 42])
def test_run_async_argument_errors_stay_orts(
    instrumented: Telemetry, mlp_path: Path, callback: object
) -> None:
    session = cpu_session(mlp_path)
    kwargs = {} if callback == "missing" else {"callback": callback}

    def call() -> object:
        return session.run_async(None, {"x": X}, user_data=None, **kwargs)

    OrtInstrumentor().uninstrument()
    try:
        bare = capture(call)
    finally:
        OrtInstrumentor().instrument(**instrumented.providers)
    assert capture(call) == bare
    assert instrumented.spans(semconv.SPAN_RUN) == []


def capture(call: Callable[[], object]) -> tuple[str, str]:
    try:
        return ("returned", repr(call()))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def test_concurrent_first_runs_agree_on_the_session(telemetry: Telemetry, mlp_path: Path) -> None:
    for _ in range(5):
        session = cpu_session(mlp_path)  # created before instrument(): facts come at first run
        barrier = threading.Barrier(8)

        def first_run(
            session: ort.InferenceSession = session, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            session.run(None, {"x": X})

        with instrumentation(**telemetry.providers):
            threads = [threading.Thread(target=first_run) for _ in range(8)]
            run_threads(threads)
        ids = {attrs(span)[semconv.SESSION_ID] for span in telemetry.spans(semconv.SPAN_RUN)}
        assert len(ids) == 1
        telemetry.exporter.clear()


def test_set_providers_updates_providers_and_keeps_session_id(
    instrumented: Telemetry, mlp_path: Path
) -> None:
    if "AzureExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs a second execution provider; this onnxruntime build has only the CPU")
    session = ort.InferenceSession(
        mlp_path, providers=["AzureExecutionProvider", "CPUExecutionProvider"]
    )
    session.run(None, {"x": X})
    session.set_providers(["CPUExecutionProvider"])
    session.run(None, {"x": X})
    first, second = instrumented.spans(semconv.SPAN_RUN)
    assert attrs(first)[semconv.SESSION_PROVIDERS] == (
        "AzureExecutionProvider",
        "CPUExecutionProvider",
    )
    assert attrs(second)[semconv.SESSION_PROVIDERS] == ("CPUExecutionProvider",)
    assert attrs(first)[semconv.SESSION_ID] == attrs(second)[semconv.SESSION_ID]
    assert semconv.RUN_PROVIDER_FALLBACK not in attrs(second)


def test_hooks_with_the_wrong_arity_fail_at_instrument() -> None:
    with pytest.raises(
        TypeError, match=r"request_hook=\.\.\.\) must be a callable \(span, session"
    ):
        OrtInstrumentor().instrument(request_hook=lambda span: None)
    assert not OrtInstrumentor().is_instrumented_by_opentelemetry


def test_a_child_forked_while_a_session_is_described_describes_its_own(
    instrumented: Telemetry,
) -> None:
    """Describing a session from bytes hashes the model (GIL released) under a lock; a child
    forked meanwhile must not wait forever for a lock its parent's thread held."""
    model = bytes(200 * 2**20)  # hashing takes a few hundred ms: the fork lands inside

    class Described:  # what describing reads of a session made from bytes
        def __init__(self, model: bytes) -> None:
            self._model_bytes = model
            self._providers = ["CPUExecutionProvider"]

        def get_providers(self) -> list[str]:
            return self._providers

        def get_modelmeta(self) -> object:
            return type("Meta", (), {"graph_name": "g", "producer_name": ""})()

    hashing = threading.Thread(target=session_facts.facts_for, args=(Described(model),))
    hashing.start()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # never returns to pytest
        status = 1
        try:
            # no ORT session here: ORT's own locks, held at the fork by the threads of earlier
            # tests' sessions, are not otel-ort's
            status = 0 if session_facts.facts_for(Described(b"small")).session_id else 1
        finally:
            os._exit(status)
    hashing.join()
    deadline = time.monotonic() + 30
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert waited[0] == pid and os.waitstatus_to_exitcode(waited[1]) == 0

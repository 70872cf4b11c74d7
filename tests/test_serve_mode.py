"""``profile_mode="serve"``: the twin runs the session's unprofiled runs too, so a profiled run
finds it warm. Real sessions; the user's session is watched, not replaced."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run, semconv
from otel_ort.capi import CSession
from otel_ort.sampling import Ratio
from tests.conftest import Telemetry, attrs, held_runs, instrumentation, run_threads
from tests.models import (
    float_and_bfloat16_model,
    typed_cases,
    unary_model,
    unused_input_model,
)
from tests.perf_models import matmul_chain

CPU = ["CPUExecutionProvider"]
X = {"x": np.arange(2 * 32, dtype=np.float32).reshape(2, 32) / 64}


class Watched:
    """Stands in for an ``InferenceSession``'s ``_sess`` (ORT's C++ session): counts the runs
    that reach it and passes everything on."""

    def __init__(self, sess: Any) -> None:
        self.sess = sess
        self.runs = 0

    def run(self, *args: Any) -> Any:
        self.runs += 1
        return self.sess.run(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sess, name)


def watched(session: ort.InferenceSession) -> Watched:
    watcher = Watched(session._sess)
    session._sess = watcher
    return watcher


def served(
    session: ort.InferenceSession, feeds: dict[str, Any], output_names: list[str] | None = None
) -> Watched:
    """Run once (which asks for the twin), wait until the twin serves; watch the session."""
    session.run(output_names, feeds)
    assert flush_profiles(timeout=60)
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.state == "ready", twin.reason
    return watched(session)


@pytest.fixture
def serving(telemetry: Telemetry, tmp_path: Path) -> Iterator[Telemetry]:
    with instrumentation(
        **telemetry.providers, profile_mode="serve", profile_dir=str(tmp_path / "profiles")
    ):
        yield telemetry


def serve_fallbacks(telemetry: Telemetry) -> int:
    """The fallbacks metric, checked against the profiler's own count."""
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    counted = sum(p.value for p in telemetry.points(semconv.METRIC_SERVE_FALLBACKS))
    assert counted == profiler.counts().get("serve_fallbacks", 0)
    return int(counted)


def same(got: list[Any], want: list[Any]) -> bool:
    return all(
        type(g) is type(w)
        and g.dtype == w.dtype
        and g.shape == w.shape
        and (g.tobytes() == w.tobytes() if g.dtype != object else list(g) == list(w))
        for g, w in zip(got, want, strict=True)
    )


def test_unprofiled_runs_go_to_the_twin_with_bitwise_equal_outputs(serving: Telemetry) -> None:
    for model, feeds in typed_cases():
        session = ort.InferenceSession(model, providers=CPU)
        expected = session.run(None, feeds)
        session_runs = served(session, feeds)
        for _ in range(3):
            assert same(session.run(None, feeds), expected)
        assert same(session.run(output_names=None, input_feed=feeds), expected)
        with profile_next_run():
            assert same(session.run(None, feeds), expected)
        assert session_runs.runs == 0
    assert flush_profiles(timeout=60)
    runs = serving.spans(semconv.SPAN_RUN)
    assert len(runs) == 2 * 7
    assert sum(bool(attrs(s).get(semconv.RUN_PROFILED)) for s in runs) == 2
    assert not [s for s in runs if semconv.PROFILE_SKIP_REASON in attrs(s)]


def test_runs_the_twin_cannot_take_go_to_the_session_unchanged(
    serving: Telemetry, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    expected = session.run(None, X)
    session_runs = served(session, X)
    only_path = ort.RunOptions()
    only_path.only_execute_path_to_fetches = True  # the C API cannot set it
    assert same(session.run(None, X, only_path), expected)
    assert same(session.run(None, {"x": X["x"].tolist()}), expected)  # ORT converts lists
    session.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(X["x"])})
    assert session_runs.runs == 2  # run_with_ort_values does not go through _sess.run
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument) as raised:
        session.run(None, {"x": X["x"].astype(np.float64)})  # fails on the twin, then on ORT
    assert "Unexpected input data type" in str(raised.value)
    assert session_runs.runs == 3 and serve_fallbacks(serving) == 1


def test_a_profiled_run_the_twin_fails_goes_to_the_session_once(
    serving: Telemetry, mlp_path: Path
) -> None:
    """Selected for profiling, failed on the twin (twin_error): ORT's own run gives the
    caller ORT's error, without a second try on the twin as a served run."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    session_runs = served(session, X)
    twin = session.__dict__["_otel_ort_twin"]
    twin_runs: list[bool] = []
    twin_run = twin.run

    def watched_twin_run(*args: Any, **kwargs: Any) -> Any:
        twin_runs.append(True)
        return twin_run(*args, **kwargs)

    twin.run = watched_twin_run
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument), profile_next_run():
        session.run(None, {"x": X["x"].astype(np.float64)})
    assert len(twin_runs) == 1 and session_runs.runs == 1 and serve_fallbacks(serving) == 0
    assert attrs(serving.spans(semconv.SPAN_RUN)[-1])[semconv.PROFILE_SKIP_REASON] == (
        semconv.SKIP_TWIN_ERROR
    )


def test_runs_with_run_options_the_twin_reproduces_are_served(
    serving: Telemetry, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    expected = session.run(None, X)
    session_runs = served(session, X)
    tagged = ort.RunOptions()
    tagged.logid = "request-7"
    tagged.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert same(session.run(None, X, tagged), expected)
    assert same(session.run(None, X, run_options=ort.RunOptions()), expected)
    assert session_runs.runs == 0 and serve_fallbacks(serving) == 0


def test_run_options_terminate_ends_a_served_run_as_it_ends_orts_own(serving: Telemetry) -> None:
    """``terminate`` set from another thread while the twin serves the run: the twin's run
    ends, and ORT's own run, which then raises at once, gives the caller ORT's exception (not
    counted as a fallback: nothing failed)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(matmul_chain(nodes=256), options, providers=CPU)
    feeds = {"x": np.ones((512, 512), np.float32)}
    session_runs = served(session, feeds)  # a run takes about 0.7 s here; terminated at 0.05 s
    twin = session.__dict__["_otel_ort_twin"]
    terminations: list[Any] = []
    twin_run = twin.run

    def watched_twin_run(*args: Any, **kwargs: Any) -> Any:
        terminations.append(kwargs.get("termination"))
        return twin_run(*args, **kwargs)

    twin.run = watched_twin_run
    run_options = ort.RunOptions()
    timer = threading.Timer(0.05, lambda: setattr(run_options, "terminate", True))
    timer.start()
    with pytest.raises(Exception, match="terminate flag") as caught:  # not the twin's outputs
        session.run(None, feeds, run_options)
    timer.join()
    assert type(caught.value).__module__.startswith("onnxruntime")
    assert [t.requested for t in terminations] == [True]  # the twin took it, and was ended
    assert session_runs.runs == 1 and serve_fallbacks(serving) == 0


def test_an_output_the_twin_cannot_convert_stops_it_serving(serving: Telemetry) -> None:
    """A run asking for an output the binding cannot convert falls back to ORT, which raises as
    usual; the twin then serves no more runs (each would run twice). An input it cannot convert
    does not stop it: the next call may bring that input in another form."""
    session = ort.InferenceSession(float_and_bfloat16_model(), providers=CPU)
    x = {"x": np.array([-1.0, 2.0], np.float32)}
    session_runs = served(session, x, ["y"])
    with pytest.raises(RuntimeError, match="be converted to MLDataType"):
        session.run(["y"], {"x": x["x"].astype(np.complex64)})
    assert session.run(["y"], x)[0].tolist() == [0.0, 2.0]
    assert session_runs.runs == 1 and serve_fallbacks(serving) == 1  # still serving
    for _ in range(2):
        with pytest.raises(RuntimeError, match="No corresponding Numpy type"):
            session.run(None, x)
    assert session.run(["y"], x)[0].tolist() == [0.0, 2.0]
    assert session_runs.runs == 4 and serve_fallbacks(serving) == 2


def test_a_twin_primed_on_an_output_it_cannot_convert_profiles_but_does_not_serve(
    serving: Telemetry,
) -> None:
    session = ort.InferenceSession(float_and_bfloat16_model(), providers=CPU)
    x = {"x": np.array([-1.0, 2.0], np.float32)}
    with pytest.raises(RuntimeError, match="No corresponding Numpy type"):
        session.run(None, x)  # asks for the twin, primed with this call
    assert flush_profiles(timeout=60)
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.state == "ready" and not twin.serves_unprofiled
    session_runs = watched(session)
    with profile_next_run():
        assert session.run(["y"], x)[0].tolist() == [0.0, 2.0]
    assert session.run(["y"], x)[0].tolist() == [0.0, 2.0]
    assert session_runs.runs == 1  # the unprofiled run
    assert flush_profiles(timeout=60)
    runs = serving.spans(semconv.SPAN_RUN)
    assert sorted(bool(attrs(s).get(semconv.RUN_PROFILED)) for s in runs) == [False, False, True]


def test_a_session_profiling_itself_is_never_served(
    serving: Telemetry, mlp_path: Path, tmp_path: Path
) -> None:
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "user")
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    session_runs = served(session, X)
    for _ in range(3):
        session.run(None, X)
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    assert session_runs.runs == 3
    user_events = json.loads(Path(session.end_profiling()).read_text())
    assert sum(e["name"] == "model_run" for e in user_events) == 4  # every run but the profiled
    assert sum(bool(attrs(s).get(semconv.RUN_PROFILED)) for s in serving.spans(semconv.SPAN_RUN))


def test_threads_share_the_twin_and_profiled_runs_get_their_perf_counts(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """With perf on, the serving twin's pool is counted during profiled runs only."""
    profiles = tmp_path / "profiles"
    with instrumentation(
        **telemetry.providers,
        profile_mode="serve",
        profile_dir=str(profiles),
        profile_sampler=Ratio(0.2),
        perf_events=["task-clock", "page-faults"],
    ):
        session = ort.InferenceSession(matmul_chain(), providers=CPU)
        feeds = {"x": np.ones((512, 512), np.float32)}
        expected = session.run(None, feeds)
        session_runs = served(session, feeds)
        pool = session.__dict__["_otel_ort_twin"].pool
        assert pool is not None and not pool.stays_on
        failures: list[BaseException] = []

        def hammer() -> None:
            try:
                for _ in range(25):
                    assert same(session.run(None, feeds), expected)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        run_threads(threads)
        assert flush_profiles(timeout=60)
    assert not failures
    assert session_runs.runs < 100  # only those during a counted profiled run (next test)
    profiled = [s for s in telemetry.spans(semconv.SPAN_RUN) if attrs(s).get(semconv.RUN_PROFILED)]
    assert profiled and len(list(profiles.glob("otel-ort_*.json"))) == len(profiled)
    assert all(attrs(s)["perf.task-clock"] > 0 for s in profiled)


def test_while_a_profiled_run_is_counted_other_runs_go_to_the_session(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """The pool's counts of a profiled run must be its own: other runs of the session do not
    share the twin's threads meanwhile (the counted run holds its pool's lock)."""
    with instrumentation(
        **telemetry.providers, profile_mode="serve", profile_dir=str(tmp_path), perf_events=True
    ):
        session = ort.InferenceSession(matmul_chain(), providers=CPU)
        feeds = {"x": np.ones((512, 512), np.float32)}
        session_runs = served(session, feeds)
        pool = session.__dict__["_otel_ort_twin"].pool
        assert pool is not None
        session.run(None, feeds)
        assert session_runs.runs == 0
        with pool.lock:  # as during a counted profiled run
            session.run(None, feeds)
        assert session_runs.runs == 1


def test_calls_ort_refuses_are_refused_as_without_otel_ort(
    serving: Telemetry, tmp_path: Path
) -> None:
    model = unused_input_model()
    feeds = {"a": np.ones(2, np.float32)}
    session = ort.InferenceSession(model, providers=CPU)
    served(session, {**feeds, "b": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="Required inputs"):
        session.run(None, feeds)  # "b" feeds no node: the C API would not mind
    with profile_next_run(), pytest.raises(ValueError, match="Required inputs"):
        session.run(None, feeds)
    full = {**feeds, "b": np.ones(2, np.float32)}
    run: Any = session.run  # calls that do not bind, as a user may write them
    for args, kwargs in (
        ((), {"input_feed": full}),
        ((None, full), {"run_option": None}),
        ((None, full, None, 5), {}),
        ((None, full), {"input_feed": full}),
    ):
        with pytest.raises(TypeError):
            run(*args, **kwargs)
    assert serve_fallbacks(serving) == 0


def test_requests_ort_refuses_leave_the_twin_waiting_for_inputs_to_prime_it_with(
    serving: Telemetry, mlp_path: Path
) -> None:
    """A service's first calls are bad requests: each fails as without otel-ort, none uses
    up the twin's priming attempts or rebuilds it; the first good one primes it."""
    expected = ort.InferenceSession(mlp_path, providers=CPU).run(None, X)
    session = ort.InferenceSession(mlp_path, providers=CPU)
    bad_requests = [
        ({"x": np.zeros((1, 3), np.float32)}, "INVALID_ARGUMENT"),  # shape
        ({"x": X["x"].astype(np.float64)}, "INVALID_ARGUMENT"),  # element type
        ({}, "Required inputs"),
        ({"x": [[1.0] * 32]}, None),  # a list: ORT converts it, the twin cannot
    ]
    twin: Any = None
    for _ in range(2):
        for feeds, error in bad_requests:
            with contextlib.ExitStack() as stack:
                if error is not None:
                    stack.enter_context(pytest.raises(Exception, match=error))
                session.run(None, feeds)
            assert flush_profiles(timeout=60)
            twin = twin or session.__dict__["_otel_ort_twin"]
            assert session.__dict__["_otel_ort_twin"] is twin
            assert twin.state == "unprimed", (feeds, twin.reason)
    session.run(None, X)  # primes it
    assert flush_profiles(timeout=60)
    assert session.__dict__["_otel_ort_twin"] is twin and twin.state == "ready", twin.reason
    session_runs = watched(session)
    with profile_next_run():
        assert same(session.run(None, X), expected)
    assert flush_profiles(timeout=60)
    assert attrs(serving.spans(semconv.SPAN_RUN)[-1])[semconv.RUN_PROFILED] is True
    assert session_runs.runs == 0 and serve_fallbacks(serving) == 0


def test_a_model_file_replaced_after_the_session_was_made_is_not_twinned(
    serving: Telemetry, tmp_path: Path
) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(unary_model("Neg"))
    session = ort.InferenceSession(path, providers=CPU)
    path.write_bytes(unary_model("Abs"))  # the next export to the same path
    assert_not_twinned_for_its_changed_file(session)


def assert_not_twinned_for_its_changed_file(session: ort.InferenceSession) -> None:
    """A session of ``unary_model("Neg")`` whose file now holds another model: its runs ask for
    a twin, which fails saying why, and the session's own numbers stay Neg's."""
    x = {"x": np.array([1.0, -2.0], np.float32)}
    for _ in range(2):
        session.run(None, x)
        assert flush_profiles(timeout=60)
    assert session.run(None, x)[0].tolist() == [-1.0, 2.0]
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.state == "failed" and "model file changed" in twin.reason


def test_a_model_file_rewritten_in_place_with_its_size_and_mtime_is_not_twinned(
    serving: Telemetry, tmp_path: Path
) -> None:
    """Only the change time gives such a rewrite away (the same inode, size and mtime)."""
    path = tmp_path / "model.onnx"
    path.write_bytes(unary_model("Neg"))
    session = ort.InferenceSession(path, providers=CPU)
    before = path.stat()
    time.sleep(0.01)
    path.write_bytes(unary_model("Abs"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns
    )  # fmt: skip
    assert_not_twinned_for_its_changed_file(session)


def test_a_model_file_replaced_while_the_twin_loads_it_is_not_twinned(
    serving: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new export lands between the check before the twin's load and the load itself."""
    path = tmp_path / "model.onnx"
    path.write_bytes(unary_model("Neg"))
    session = ort.InferenceSession(path, providers=CPU)

    class LoadedThenReplaced(CSession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            path.write_bytes(unary_model("Abs"))

    monkeypatch.setattr("otel_ort.profiling.profiler.CSession", LoadedThenReplaced)
    assert_not_twinned_for_its_changed_file(session)


def test_a_relative_model_path_is_the_file_it_named_when_the_session_was_made(
    serving: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, op in (("made", "Neg"), ("elsewhere", "Abs")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.onnx").write_bytes(unary_model(op))
    monkeypatch.chdir(tmp_path / "made")
    session = ort.InferenceSession("model.onnx", providers=CPU)
    monkeypatch.chdir(tmp_path / "elsewhere")
    x = {"x": np.array([1.0, -2.0], np.float32)}
    served(session, x)
    assert session.run(None, x)[0].tolist() == [-1.0, 2.0]


def test_runs_while_the_worker_queue_is_full_make_no_twin_until_there_is_room(
    serving: Telemetry, mlp_path: Path
) -> None:
    """Each run asks for a twin; with no room to build one, none is made (nor a finalizer,
    nor a priming attempt counted), and the first run after the backlog clears gets one."""
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    worker, started, gate = profiler.worker, threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait()

    assert worker.submit(hold)
    assert started.wait(timeout=60)
    while worker.submit(lambda: None):  # fill the queue behind the held job
        pass
    try:
        session = ort.InferenceSession(mlp_path, providers=CPU)
        expected = session.run(None, X)
        for _ in range(50):
            assert same(session.run(None, X), expected)
        assert "_otel_ort_twin" not in session.__dict__ and not list(profiler._twins)
    finally:
        gate.set()
    assert flush_profiles(timeout=60)
    served(session, X)
    assert session.__dict__["_otel_ort_twin"].attempts == 1


@pytest.mark.parametrize("profiled", [False, True], ids=["served", "profiled"])
def test_shutdown_does_not_wait_past_its_timeout_for_a_run_on_a_twin(
    serving: Telemetry, caplog: pytest.LogCaptureFixture, mlp_path: Path, profiled: bool
) -> None:
    """At exit, a run still going on a twin (another thread's) is not waited for beyond the
    shutdown timeout, counted by perf (which holds the pool) or not; it still returns."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    expected = session.run(None, X)
    session_runs = served(session, X)
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.pool is not None or not profiled, "perf counters are needed here"
    waiting, go = held_runs(twin.session)
    results: list[Any] = []

    def run() -> None:
        with profile_next_run() if profiled else contextlib.nullcontext():
            results.append(session.run(None, X))

    worker = threading.Thread(target=run)
    worker.start()
    assert waiting.wait(10)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    with caplog.at_level(logging.WARNING, logger="otel_ort"):
        shutdown = threading.Thread(target=profiler.shutdown, kwargs={"timeout": 0.05})
        shutdown.start()
        shutdown.join(10)
        held_up = shutdown.is_alive()
        go.set()
        worker.join()
        shutdown.join()
    assert not held_up
    assert "1 twin(s) still had runs in flight at shutdown" in caplog.text
    assert same(results[0], expected) and session_runs.runs == 0  # the twin's run returned

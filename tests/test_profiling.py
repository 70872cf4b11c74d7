"""Run-level profiling through the session's C-API twin: real ORT sessions, real profile files,
real span trees."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import mmap
import os
import random
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import Fail
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run, sampling, semconv
from otel_ort.capi import CSession, SessionConfig
from otel_ort.failures import failure_counts
from otel_ort.profiling import recorded_options
from otel_ort.profiling.store import ProfileDirError
from otel_ort.profiling.twin import twin_config
from otel_ort.sampling import Always, EveryNth, Never, ProfileSampler, Ratio
from tests.conftest import Telemetry, attrs, held_runs, instrumentation, run_threads
from tests.models import reshape_model, string_model, typed_cases
from tests.perf_models import matmul_chain

CPU = ["CPUExecutionProvider"]
X = {"x": np.arange(2 * 32, dtype=np.float32).reshape(2, 32) / 64}


def run_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    """Run spans in the order the runs started (profiled ones end later, in the worker)."""
    return sorted(telemetry.spans(semconv.SPAN_RUN), key=lambda span: span.start_time or 0)


def profiled_spans(telemetry: Telemetry) -> list[ReadableSpan]:
    return [s for s in run_spans(telemetry) if attrs(s).get(semconv.RUN_PROFILED)]


def children_of(telemetry: Telemetry, span: ReadableSpan) -> list[ReadableSpan]:
    span_id = span.context.span_id
    return [s for s in telemetry.spans() if s.parent is not None and s.parent.span_id == span_id]


def profile_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("otel-ort_*.json"))


def ready(session: ort.InferenceSession, feeds: dict[str, Any]) -> None:
    """Force one run so that the session's twin gets built, and wait until it serves."""
    with profile_next_run():
        session.run(None, feeds)
    assert flush_profiles(timeout=60)


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    return tmp_path / "profiles"


@pytest.fixture
def profiling(telemetry: Telemetry, profile_dir: Path) -> Iterator[Telemetry]:
    """Instrumented; no run is sampled, so tests force the runs they want profiled."""
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        yield telemetry


def test_a_forced_run_is_profiled_once_the_twin_serves(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    expected = session.run(None, X)
    with profile_next_run():
        first = session.run(None, X)
    assert flush_profiles(timeout=60)
    with profile_next_run():
        second = session.run(None, X)
    assert flush_profiles(timeout=60)

    _, waiting, profiled = run_spans(profiling)
    assert attrs(waiting)[semconv.RUN_PROFILED] is False
    assert attrs(waiting)[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_NOT_READY
    run = attrs(profiled)
    assert run[semconv.RUN_PROFILED] is True
    path = Path(str(run[semconv.PROFILE_FILE]))
    assert profile_files(profile_dir) == [path]
    assert path.name.endswith("-1.json")  # the twin's priming run takes no number
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(profile_dir.stat().st_mode) == 0o700
    nodes = children_of(profiling, profiled)
    assert len(nodes) == run[semconv.RUN_NODE_COUNT] > 0
    for node in nodes:
        assert node.context.trace_id == profiled.context.trace_id
        assert profiled.start_time and profiled.end_time and node.start_time and node.end_time
        assert profiled.start_time <= node.start_time <= node.end_time <= profiled.end_time
    document = json.loads(path.read_text())
    assert document["otherData"]["trace_id"] == f"{profiled.context.trace_id:032x}"
    assert document["otherData"]["span_id"] == f"{profiled.context.span_id:016x}"
    for outputs in (first, second):
        assert all(
            np.array_equal(a, b) and a.dtype == b.dtype
            for a, b in zip(expected, outputs, strict=True)
        )
    assert not list((profile_dir / ".pending").glob("*.json"))  # ORT's raw files are gone


def test_profiled_outputs_are_bitwise_those_of_ort(profiling: Telemetry, tmp_path: Path) -> None:
    for model, feeds in typed_cases():
        session = ort.InferenceSession(model, providers=CPU)
        ready(session, feeds)
        with profile_next_run():
            profiled = session.run(None, feeds)
        plain = session.run(None, feeds)
        for got, want in zip(profiled, plain, strict=True):
            assert type(got) is type(want)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert (
                got.tobytes() == want.tobytes() if got.dtype != object else list(got) == list(want)
            )
    assert flush_profiles(timeout=60)
    assert len(profiled_spans(profiling)) == 2


def test_ratio_and_every_nth_over_400_runs(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sampling, "_draw", random.Random(4).random)  # no 0.1% flake
    for sampler, low, high in ((Ratio(0.25), 72, 129), (EveryNth(10), 40, 40)):
        telemetry.exporter.clear()
        with instrumentation(
            **telemetry.providers, profile_sampler=sampler, profile_dir=str(tmp_path / "p")
        ):
            session = ort.InferenceSession(mlp_path, providers=CPU)
            ready(session, X)  # forced: the sampler is not asked
            telemetry.exporter.clear()
            for _ in range(400):
                session.run(None, X)
            assert flush_profiles(timeout=120)
            assert low <= len(profiled_spans(telemetry)) <= high, sampler


def test_three_threads_two_profiled_two_files_two_trees(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    with profile_next_run():  # alone: how many nodes one run has
        session.run(None, X)
    assert flush_profiles(timeout=60)
    (alone,) = profiled_spans(profiling)
    nodes_per_run = len(children_of(profiling, alone))
    profiling.exporter.clear()
    for path in profile_files(profile_dir):
        path.unlink()
    barrier = threading.Barrier(3)
    thread_ids: dict[str, int] = {}

    def work(name: str, profiled: bool) -> None:
        thread_ids[name] = threading.get_native_id()
        barrier.wait()
        if profiled:
            with profile_next_run():
                session.run(None, X)
        else:
            session.run(None, X)

    threads = [
        threading.Thread(target=work, args=(name, profiled))
        for name, profiled in (("t1", True), ("t2", False), ("t3", True))
    ]
    run_threads(threads)
    assert flush_profiles(timeout=60)

    files = profile_files(profile_dir)
    spans = profiled_spans(profiling)
    assert len(files) == len(spans) == 2
    for span in spans:
        document = json.loads(Path(str(attrs(span)[semconv.PROFILE_FILE])).read_text())
        events = [e for e in document["traceEvents"] if e["ph"] == "X"]
        assert sum(e["name"] == "model_run" for e in events) == 1
        node_events = [e for e in events if e["cat"] == "Node"]
        assert len(node_events) == nodes_per_run  # its own run's nodes, no other's
        assert len({e["tid"] for e in node_events}) == 1  # all on its own caller's thread
        nodes = children_of(profiling, span)
        assert len(nodes) == attrs(span)[semconv.RUN_NODE_COUNT] == nodes_per_run
    assert {node_thread(s) for s in spans} == {thread_ids["t1"], thread_ids["t3"]}


def node_thread(span: ReadableSpan) -> int:
    document = json.loads(Path(str(attrs(span)[semconv.PROFILE_FILE])).read_text())
    return int(next(e["tid"] for e in document["traceEvents"] if e.get("cat") == "Node"))


@pytest.mark.parametrize("forced", [False, True], ids=["sampled", "sampled and forced"])
def test_session_level_profiling_of_the_user_is_left_alone(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path, tmp_path: Path, forced: bool
) -> None:
    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), profile_sampler=EveryNth(3)
    ):
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / "user")
        session = ort.InferenceSession(mlp_path, options, providers=CPU)
        ready(session, X)  # a forced run, which ORT's session runs while the twin is built
        if forced:  # forced runs are not the sampler's to count
            with profile_next_run():
                session.run(None, X)
        for _ in range(4):
            session.run(None, X)  # the third is sampled
        assert flush_profiles(timeout=60)
        user_file = Path(session.end_profiling())
    user_events = json.loads(user_file.read_text())
    # the user's file holds the four runs ORT's own session made (no warm-up went to the
    # twin: a session profiling itself gets none), not the twin's profiled ones
    assert sum(e["name"] == "model_run" for e in user_events) == 4
    profiled = 2 if forced else 1
    assert len(profile_files(profile_dir)) == profiled  # the priming run is not kept
    assert len(profiled_spans(telemetry)) == profiled


def test_runs_that_cannot_go_to_the_twin_say_why(profiling: Telemetry, mlp_path: Path) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    profiling.exporter.clear()
    with profile_next_run():
        session.run(None, {"x": X["x"].tolist()})  # ORT converts lists; the twin does not
    with profile_next_run():
        session.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(X["x"])})
    done = threading.Event()
    with profile_next_run():
        session.run_async(None, X, lambda *_: done.set(), None)
    assert done.wait(timeout=30)
    with profile_next_run(), pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
        session.run(None, {"x": X["x"].astype(np.float64)})
    only_path = ort.RunOptions()
    only_path.only_execute_path_to_fetches = True
    with profile_next_run():
        session.run(None, X, only_path)
    with profile_next_run(), pytest.raises(TypeError):  # ORT's to refuse, as ever
        session.run(None, X, {"terminate": False})
    binding = session.io_binding()
    binding.bind_cpu_input("x", X["x"])
    binding.bind_output(session.get_outputs()[0].name)
    with profile_next_run():
        session.run_with_iobinding(binding)
    spans = run_spans(profiling)
    reasons = [attrs(s).get(semconv.PROFILE_SKIP_REASON) for s in spans]
    assert reasons == [
        semconv.SKIP_VALUE,
        semconv.SKIP_METHOD,
        semconv.SKIP_METHOD,
        semconv.SKIP_TWIN_ERROR,
        semconv.SKIP_TWIN_UNAVAILABLE,
        semconv.SKIP_VALUE,
        semconv.SKIP_METHOD,
    ]
    assert "run_with_iobinding" in str(attrs(spans[-1])[semconv.PROFILE_SKIP_DETAIL])
    assert all(len(str(attrs(s)[semconv.PROFILE_SKIP_DETAIL])) <= 512 for s in spans)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], session.run(None, X)[0])


def test_baggage_forces_a_profile(profiling: Telemetry, mlp_path: Path) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    token = otel_context.attach(baggage.set_baggage("onnxruntime.profile", "1"))
    try:
        session.run(None, X)
    finally:
        otel_context.detach(token)
    session.run(None, X)
    assert flush_profiles(timeout=60)
    assert [attrs(s)[semconv.RUN_PROFILED] for s in run_spans(profiling)][-2:] == [True, False]


def test_retention_and_counts(telemetry: Telemetry, tmp_path: Path, mlp_path: Path) -> None:
    directory = tmp_path / "kept"
    with instrumentation(
        **telemetry.providers,
        profile_sampler=Always(),
        profile_dir=str(directory),
        profile_max_files=2,
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        for _ in range(5):
            session.run(None, X)
        assert flush_profiles(timeout=60)
        counts = OrtInstrumentor()._profiler.counts()
    assert len(profile_files(directory)) == 2
    assert counts["profiled"] == 5 and counts["files_deleted"] == 3
    assert counts[semconv.SKIP_TWIN_NOT_READY] == 1
    points = {
        p.attributes[semconv.PROFILE_OUTCOME]: p.value
        for p in telemetry.points(semconv.METRIC_PROFILE_RUNS)
    }
    assert points == {"profiled": 5, semconv.SKIP_TWIN_NOT_READY: 1}
    assert sum(p.value for p in telemetry.points(semconv.METRIC_PROFILE_FILES_DELETED)) == 3


def test_tensor_contents_never_reach_files_or_spans(
    profiling: Telemetry, profile_dir: Path
) -> None:
    session = ort.InferenceSession(string_model(), providers=CPU)
    feeds = {"s": np.array(["SECRET-VALUE-123"], dtype=object)}
    ready(session, feeds)
    with profile_next_run():
        session.run(None, feeds)
    assert flush_profiles(timeout=60)
    for path in profile_files(profile_dir):
        assert "SECRET-VALUE-123" not in path.read_text()
    for span in profiling.spans():
        assert "SECRET-VALUE-123" not in repr(attrs(span))


def test_profile_mode_off_and_a_bad_profile_dir(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    with instrumentation(**telemetry.providers, profile_mode="off", profile_sampler=Always()):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        with profile_next_run():
            session.run(None, X)
        assert OrtInstrumentor()._profiler is None
    assert semconv.PROFILE_SKIP_REASON not in attrs(run_spans(telemetry)[0])
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(ProfileDirError, match="symbolic link"):
        OrtInstrumentor().instrument(profile_dir=str(tmp_path / "link"))
    assert not OrtInstrumentor().is_instrumented_by_opentelemetry


def assert_new_threads(before: set[str], expected: int) -> None:
    """This process has ``expected`` threads (Python's and ORT's native ones) not in
    ``before``, leaving out gRPC's: its timer and executor threads (of the OTLP exporters
    earlier tests used) come and go on their own. Waits up to 2 s: a thread that was joined
    may still be leaving the kernel's list (``flush_profiles`` flushes in threads of its
    own)."""
    deadline = time.monotonic() + 2
    while True:
        count = sum(1 for tid in set(os.listdir("/proc/self/task")) - before if not _grpc(tid))
        if count == expected or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert count == expected, f"{count} new threads, expected {expected}"


def _grpc(tid: str) -> bool:
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().startswith(("grpc", "default-exec"))
    except OSError:  # it has ended
        return True


def test_twins_close_with_their_session_and_at_uninstrument(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    CSession(SessionConfig(model=str(mlp_path))).close()  # ORT's C env: one thread for good
    gc.collect()
    before = set(os.listdir("/proc/self/task"))
    fds = len(os.listdir("/proc/self/fd"))
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 3  # the twin copies it: two pool threads each
        session = ort.InferenceSession(mlp_path, options, providers=CPU)
        assert_new_threads(before, 2)
        ready(session, X)
        assert_new_threads(before, 2 + 2 + 1)  # the twin's pool and the worker
        del session
        gc.collect()
        assert flush_profiles(timeout=60)
        assert_new_threads(before, 1)  # the worker only
        kept = ort.InferenceSession(mlp_path, options, providers=CPU)
        ready(kept, X)
    assert_new_threads(before, 2)  # kept's own pool; twin and worker are gone
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds  # the profile store's lock too: kept
    del kept  # does not keep the uninstrumented profiler alive
    gc.collect()
    assert_new_threads(before, 0)
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_session_collected_with_its_profile_pending_still_gets_its_tree(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """The session goes before the worker has converted its profiled run: the run's file and
    span tree still come, then the twin is released."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    twin = session.__dict__["_otel_ort_twin"]
    gate = threading.Event()
    assert OrtInstrumentor()._profiler.worker.submit(lambda: gate.wait(60))  # holds the worker
    with profile_next_run():
        session.run(None, X)
    del session
    gc.collect()
    assert twin.state != "closed"  # its release waits behind the pending conversion
    gate.set()
    assert flush_profiles(timeout=60)
    (span,) = profiled_spans(profiling)
    assert len(children_of(profiling, span)) == attrs(span)[semconv.RUN_NODE_COUNT] > 0
    assert Path(str(attrs(span)[semconv.PROFILE_FILE])).is_file()
    assert twin.state == "closed"


@pytest.mark.parametrize("queue", ["room", "full"])
def test_a_session_rebuilt_by_ort_gets_a_new_twin(
    profiling: Telemetry, mlp_path: Path, queue: str
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    old_twin = session.__dict__["_otel_ort_twin"]
    if queue == "full":  # the new twin's build takes the last place: the old one closes at once
        OrtInstrumentor()._profiler.worker.max_pending = 1
    session.set_providers(CPU)  # ORT re-creates the session
    with profile_next_run():
        session.run(None, X)
    assert (
        attrs(run_spans(profiling)[-1])[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_NOT_READY
    )
    ready(session, X)
    assert old_twin.state == "closed"  # the superseded twin gave its memory and threads back
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    assert attrs(run_spans(profiling)[-1])[semconv.RUN_PROFILED] is True


def test_a_run_that_finds_profiling_shut_down_after_its_checks_says_so(
    profiling: Telemetry, mlp_path: Path
) -> None:
    """uninstrument() between a selected run's checks and its place in the worker's queue:
    'profiling_unavailable', not a full backlog."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    outputs: list[Any] = []
    run_options = ort.RunOptions()  # recorded: the twin reads it under the lock held below

    def selected_run() -> None:
        with profile_next_run():
            outputs.append(session.run(None, X, run_options))

    with recorded_options._recorded_lock:  # the run waits there, reading its RunOptions
        thread = threading.Thread(target=selected_run)
        thread.start()
        time.sleep(0.2)
        profiler.shutdown()
    thread.join()
    assert outputs and outputs[0][0].shape == session.run(None, X)[0].shape
    skipped = attrs(run_spans(profiling)[-2])
    assert skipped[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_UNAVAILABLE
    assert skipped[semconv.PROFILE_SKIP_DETAIL] == "otel-ort's profiling was shut down"


def test_a_twin_waiting_for_inputs_ort_accepts_is_released_with_its_session(
    profiling: Telemetry, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with profile_next_run(), pytest.raises(Exception, match="INVALID_ARGUMENT"):
        session.run(None, {"x": np.zeros((2, 3), np.float32)})
    assert flush_profiles(timeout=60)
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.state == "unprimed" and twin._unprimed is not None
    del session
    gc.collect()
    assert flush_profiles(timeout=60)
    assert twin.state == "closed" and twin._unprimed is None


def test_free_dimension_overrides_and_config_entries_reach_the_twin(
    profiling: Telemetry, mlp_path: Path
) -> None:
    options = ort.SessionOptions()
    options.add_free_dimension_override_by_name("batch", 2)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    ready(session, X)
    with profile_next_run(), pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
        session.run(None, {"x": np.ones((3, 32), np.float32)})
    assert attrs(run_spans(profiling)[-1])[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_ERROR


def test_optimization_level_execution_mode_and_threads_reach_the_twin(
    profiling: Telemetry, mlp_path: Path
) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.inter_op_num_threads = 2
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    config = twin_config(session)
    assert (config.graph_optimization_level, config.execution_mode) == (0, 1)
    assert (config.inter_op_num_threads, config.intra_op_num_threads) == (2, 1)
    assert config.config_entries == {"session.set_denormal_as_zero": "1"}
    ready(session, X)
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    (span,) = profiled_spans(profiling)
    op_types = {attrs(node)[semconv.NODE_OP_TYPE] for node in children_of(profiling, span)}
    # nothing fused: the twin runs the model's own nodes, as the user's session does
    assert op_types == {node.op_type for node in onnx.load(mlp_path).graph.node}


def test_never_sampler_needs_no_directory(telemetry: Telemetry, mlp_path: Path) -> None:
    with instrumentation(**telemetry.providers, profile_sampler=Never()):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        session.run(None, X)
    assert attrs(run_spans(telemetry)[0])[semconv.RUN_PROFILED] is False


def test_profiling_works_in_a_forked_child(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # ORT's own pool threads would not exist in the child
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    ready(session, X)
    pooled_options = ort.SessionOptions()
    pooled_options.intra_op_num_threads = 4
    pooled = ort.InferenceSession(mlp_path, pooled_options, providers=CPU)
    ready(pooled, X)  # its twin has pool threads, which the child does not have
    profiling.exporter.clear()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, never return to pytest
        status = 1
        try:
            with profile_next_run():
                session.run(None, X)  # the parent's twin is not used: a new one is built
            assert flush_profiles(timeout=60)
            with profile_next_run():
                session.run(None, X)
            assert flush_profiles(timeout=60)
            report = [
                (
                    attrs(s).get(semconv.PROFILE_SKIP_REASON),
                    attrs(s).get(semconv.PROFILE_FILE),
                    attrs(s).get("perf.task-clock", 0),  # the child's threads are counted
                )
                for s in run_spans(profiling)
            ]
            counts = OrtInstrumentor()._profiler.counts()
            os.write(
                write_end, json.dumps([report, len(profiled_spans(profiling)), counts]).encode()
            )
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report, profiled, counts = json.loads(pipe.read() or "[[], 0, {}]")
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    assert [reason for reason, _, _ in report] == [semconv.SKIP_TWIN_NOT_READY, None]
    assert profiled == 1
    assert counts == {semconv.SKIP_TWIN_NOT_READY: 1, "profiled": 1}  # the child's own
    assert f"_{pid}-" in report[1][1]  # named by the child: nothing shared with the parent
    assert report[1][2] > 0
    with profile_next_run():
        session.run(None, X)  # the parent's twin still serves the parent
    assert flush_profiles(timeout=60)
    assert len(profiled_spans(profiling)) == 1
    assert attrs(profiled_spans(profiling)[0])["perf.task-clock"] > 0


def test_uninstrument_leaves_ort_options_working(telemetry: Telemetry, mlp_path: Path) -> None:
    with instrumentation(**telemetry.providers):
        pass
    options = ort.SessionOptions()
    options.add_free_dimension_override_by_name("batch", 2)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    run_options = ort.RunOptions()
    run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    assert session.run(None, X, run_options)[0].shape == (2, 32)


def test_run_options_terminate_ends_a_profiled_run_as_it_ends_orts_own(
    profiling: Telemetry,
) -> None:
    """``terminate`` set from another thread while the twin runs: the twin's run ends too, and
    the caller gets ORT's own exception (ORT's run, retried, finds the flag set)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(matmul_chain(nodes=256), options, providers=CPU)
    feeds = {"x": np.ones((512, 512), np.float32)}
    ready(session, feeds)  # a run takes about 0.7 s here; terminated after 0.05 s
    run_options = ort.RunOptions()
    timer = threading.Timer(0.05, lambda: setattr(run_options, "terminate", True))
    timer.start()
    with profile_next_run(), pytest.raises(Exception, match="terminate flag") as caught:
        session.run(None, feeds, run_options)
    timer.join()
    assert type(caught.value).__module__.startswith("onnxruntime")
    assert attrs(run_spans(profiling)[-1])[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_ERROR


def test_a_response_hook_may_flush_profiles_during_a_profiled_run(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """The hook runs before the run is handed to the worker: a flush there does not wait for
    that run (it cannot), and returns at once rather than at its timeout."""
    flushed: list[bool] = []

    def response_hook(span: Any, session: Any, outputs: Any) -> None:
        flushed.append(flush_profiles(timeout=30))

    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), response_hook=response_hook
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
    assert flushed == [True, True]
    assert attrs(run_spans(telemetry)[-1])[semconv.RUN_PROFILED] is True


def test_options_the_twin_cannot_know_make_the_session_unprofilable(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Among them what a session was created with, which ORT does not keep: a session
    created before instrument() may have disabled optimizers a twin would run."""
    early = ort.SessionOptions()  # made before instrument(): its history is unknown
    early.add_session_config_entry("session.set_denormal_as_zero", "1")
    sessions = [ort.InferenceSession(mlp_path, providers=CPU)]  # before instrument()
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        with_initializer = ort.SessionOptions()
        with_initializer.add_initializer("unused", ort.OrtValue.ortvalue_from_numpy(X["x"]))
        sessions += [
            ort.InferenceSession(mlp_path, o, providers=CPU) for o in (early, with_initializer)
        ]
        no_fusion = {"disabled_optimizers": ["MatMulAddFusion"]}
        sessions.append(ort.InferenceSession(mlp_path, providers=CPU, **no_fusion))
        with suppress_instrumentation():  # untraced, still seen
            sessions.append(ort.InferenceSession(mlp_path, providers=CPU, **no_fusion))
        for session in sessions:
            ready(session, X)
            with profile_next_run():
                session.run(None, X)
    details = [
        str(attrs(s)[semconv.PROFILE_SKIP_DETAIL])
        for s in run_spans(telemetry)
        if attrs(s).get(semconv.PROFILE_SKIP_REASON) == semconv.SKIP_TWIN_UNAVAILABLE
    ]
    assert len(details) == 5
    assert details[0].startswith("it was created before instrument() (or while profiling was off)")
    assert "SessionOptions was created before instrument()" in details[1]
    assert "add_initializer" in details[2]
    assert details[3] == details[4] == "it was created with disabled_optimizers"


def test_options_changed_while_not_instrumented_make_the_session_unprofilable(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Options made in an earlier instrument(), then changed while uninstrumented: the
    change was not seen, so their history is not whole (the twin would run without it)."""
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        options = ort.SessionOptions()
    options.add_free_dimension_override_by_name("batch", 3)  # not seen
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        session = ort.InferenceSession(mlp_path, options, providers=CPU)
        feeds = {"x": X["x"][:1].repeat(3, axis=0)}
        ready(session, feeds)
        with profile_next_run():
            session.run(None, feeds)
    _, span = run_spans(telemetry)
    assert attrs(span)[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_UNAVAILABLE
    assert "SessionOptions was created before instrument()" in str(
        attrs(span)[semconv.PROFILE_SKIP_DETAIL]
    )


def test_options_changed_after_a_session_was_made_stay_out_of_its_twin(
    profiling: Telemetry, mlp_path: Path
) -> None:
    options = ort.SessionOptions()
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    options.add_free_dimension_override_by_name("batch", 5)  # for a later session only
    ready(session, X)
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    assert attrs(run_spans(profiling)[-1])[semconv.RUN_PROFILED] is True


def test_an_interrupted_profiled_run_ends_its_span_and_gives_its_place_back(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(session.__dict__["_otel_ort_twin"], "run", interrupted)
    with profile_next_run(), pytest.raises(KeyboardInterrupt):
        session.run(None, X)
    assert flush_profiles(timeout=5)  # no reservation left behind
    span = run_spans(profiling)[-1]
    assert attrs(span)[semconv.ERROR_TYPE] == "KeyboardInterrupt"
    assert not list((profile_dir / ".pending").glob("*.json"))  # ORT's raw files are gone


@pytest.mark.parametrize("method", ["run", "run_async"])
def test_a_sampler_interrupted_ends_the_span_and_the_interrupt_goes_on(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path, method: str
) -> None:
    class Interrupted(ProfileSampler):
        def should_profile(self, span_context: trace_api.SpanContext) -> bool:
            raise KeyboardInterrupt

    profiler = dict(profile_sampler=Interrupted(), profile_dir=str(profile_dir))
    with instrumentation(**telemetry.providers, **profiler):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        with pytest.raises(KeyboardInterrupt):
            if method == "run":
                session.run(None, X)
            else:
                session.run_async(None, X, lambda *_: None, None)
    assert attrs(run_spans(telemetry)[-1])[semconv.ERROR_TYPE] == "KeyboardInterrupt"


def test_a_sampler_that_raises_is_reported_and_selects_nothing(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """A bug in the user's sampler, like one in a hook: logged and counted as a failure; the
    run is neither profiled nor counted as selected."""

    class Broken(ProfileSampler):
        def should_profile(self, span_context: trace_api.SpanContext) -> bool:
            raise ValueError("sampler bug")

    before = failure_counts().get("profile_sampler raised", 0)
    expected = ort.InferenceSession(mlp_path, providers=CPU).run(None, X)
    profiler = dict(profile_sampler=Broken(), profile_dir=str(profile_dir))
    with instrumentation(**telemetry.providers, **profiler):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        outputs = session.run(None, X)
    assert np.array_equal(outputs[0], expected[0])
    assert failure_counts()["profile_sampler raised"] == before + 1
    (span,) = run_spans(telemetry)
    assert semconv.PROFILE_SKIP_REASON not in attrs(span)
    assert telemetry.points(semconv.METRIC_PROFILE_RUNS) == []


def test_a_response_hook_interrupted_on_a_profiled_run_still_hands_the_run_over(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """KeyboardInterrupt from the hook reaches the caller; the run's reserved place is used,
    so its tree arrives and nothing waits for it."""
    interrupt = threading.Event()

    def response_hook(span: Any, session: Any, outputs: Any) -> None:
        if interrupt.is_set():
            raise KeyboardInterrupt

    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), response_hook=response_hook
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        interrupt.set()
        with profile_next_run(), pytest.raises(KeyboardInterrupt):
            session.run(None, X)
        assert flush_profiles(timeout=5)  # not its timeout: no place is left reserved
    span = run_spans(telemetry)[-1]
    assert attrs(span)[semconv.RUN_PROFILED] is True
    assert len(children_of(telemetry, span)) == 2 and len(profile_files(profile_dir)) == 1


def test_the_inputs_that_prime_a_twin_are_copies(profiling: Telemetry, mlp_path: Path) -> None:
    """The caller may free its buffers once run returns, before the worker primes the twin."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    buffer = mmap.mmap(-1, X["x"].nbytes)
    x = np.frombuffer(buffer, np.float32).reshape(X["x"].shape)
    x[:] = X["x"]
    with profile_next_run():
        session.run(None, {"x": x})
    del x
    buffer.close()  # BufferError while anything else still views it
    assert flush_profiles(timeout=60)
    assert session.__dict__["_otel_ort_twin"].state == "ready"


def test_terminate_still_reaches_a_twin_run_that_uninstrument_waits_for(
    telemetry: Telemetry, profile_dir: Path
) -> None:
    instrumentor = OrtInstrumentor()
    instrumentor.instrument(**telemetry.providers, profile_dir=str(profile_dir))
    try:
        session = ort.InferenceSession(matmul_chain(nodes=8), providers=CPU)
        feeds = {"x": np.ones((512, 512), np.float32)}
        ready(session, feeds)
        waiting, go = held_runs(session.__dict__["_otel_ort_twin"].session)
        run_options = ort.RunOptions()
        errors: list[BaseException] = []

        def profiled_run() -> None:
            try:
                with profile_next_run():
                    session.run(None, feeds, run_options)
            except Exception as exc:
                errors.append(exc)

        caller = threading.Thread(target=profiled_run)
        caller.start()
        assert waiting.wait(timeout=30)
    finally:
        stopping = threading.Thread(target=instrumentor.uninstrument)
        stopping.start()
    stopping.join(timeout=0.5)  # uninstrument now waits for the run on the twin
    run_options.terminate = True
    go.set()
    caller.join(timeout=60)
    stopping.join(timeout=60)
    assert len(errors) == 1 and "terminate flag" in str(errors[0])


def test_flush_profiles_says_when_a_span_processors_flush_failed(profile_dir: Path) -> None:
    """A processor's ``force_flush`` that returns False (an export that failed) or raises."""

    class Failing(SpanProcessor):
        outcome: bool | None = True

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            if self.outcome is None:
                raise RuntimeError("flush failed")
            return self.outcome

    provider = TracerProvider()
    failing = Failing()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    provider.add_span_processor(failing)
    with instrumentation(tracer_provider=provider, profile_dir=str(profile_dir)):
        assert flush_profiles(timeout=10)
        for failing.outcome in (False, None):
            assert not flush_profiles(timeout=10)
        failing.outcome = True
    provider.shutdown()


def test_no_flush_warning_at_uninstrument_after_the_provider_shut_down(
    profile_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Shutting the provider down first is usual; its flush then returns False at once."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    with (
        caplog.at_level(logging.WARNING, logger="otel_ort"),
        instrumentation(tracer_provider=provider, profile_dir=str(profile_dir)),
    ):
        provider.shutdown()
    assert not [record for record in caplog.records if "flush" in record.getMessage()]


def test_uninstrument_flushes_a_provider_whose_force_flush_takes_no_timeout(
    profile_dir: Path, mlp_path: Path
) -> None:
    """The SDK's ``force_flush`` takes ``timeout_millis``; a subclass may not: its profiled
    spans must still leave at ``uninstrument()`` (the batch processor would hold them 5 s)."""
    exporter = InMemorySpanExporter()

    class Provider(TracerProvider):
        def force_flush(self) -> bool:  # type: ignore[override]
            return super().force_flush()

    provider = Provider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    with instrumentation(tracer_provider=provider, profile_dir=str(profile_dir)):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        exporter.clear()
        with profile_next_run():
            session.run(None, X)
    runs = [s for s in exporter.get_finished_spans() if s.name == semconv.SPAN_RUN]
    assert [attrs(s)[semconv.RUN_PROFILED] for s in runs] == [True]
    assert len(exporter.get_finished_spans()) > 1  # its node spans too
    provider.shutdown()


def test_a_provider_not_the_sdks_gets_the_run_span_and_the_file_kept(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """A vendor's tracer provider records spans but takes no finished ones: no node spans,
    said on the run span as a problem; the Chrome JSON is still kept."""

    class VendorProvider(trace_api.TracerProvider):  # the API's, as a vendor SDK would be
        def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
            return telemetry.tracer_provider.get_tracer(*args, **kwargs)

    vendor = VendorProvider()
    with instrumentation(tracer_provider=vendor, profile_dir=str(profile_dir)):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
    (span,) = profiled_spans(telemetry)
    run = attrs(span)
    assert str(run[semconv.PROFILE_ERROR]).startswith(
        "profile spans need the OpenTelemetry SDK's TracerProvider "
        "(opentelemetry.sdk.trace.TracerProvider), got VendorProvider; "
        "the Chrome JSON is still kept"
    )
    assert Path(str(run[semconv.PROFILE_FILE])).is_file()
    assert not children_of(telemetry, span)


def test_a_run_without_a_trace_keeps_a_file_that_names_none(
    profile_dir: Path, mlp_path: Path
) -> None:
    """Without an SDK tracer provider a run's span context is invalid: its file gets no ids
    (all zeros would read as a trace to look for)."""
    with instrumentation(
        tracer_provider=trace_api.NoOpTracerProvider(), profile_dir=str(profile_dir)
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        ready(session, X)
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
    [path] = profile_files(profile_dir)
    document = json.loads(path.read_text())
    runs = [e for e in document["traceEvents"] if e.get("name") == "model_run"]
    assert runs and not any("trace_id" in e["args"] or "span_id" in e["args"] for e in runs)
    assert "trace_id" not in document["otherData"] and "span_id" not in document["otherData"]


def test_inputs_that_cannot_be_copied_for_the_twin_leave_nothing_waiting(
    profiling: Telemetry, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first selected run copies its inputs to prime the twin; a copy that fails (no
    memory) is one internal error, and no place in the worker stays taken: flushes and
    shutdown do not wait for a build that never comes, and the next selected run builds."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    copy = np.array

    def no_memory(value: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("copy") is True:
            raise MemoryError("no memory for the copy")
        return copy(value, *args, **kwargs)

    monkeypatch.setattr(np, "array", no_memory)  # the profiler's copy of the feeds
    with profile_next_run():
        expected = session.run(None, X)
    monkeypatch.undo()
    assert flush_profiles(timeout=3)  # nothing reserved: at once
    ready(session, X)
    with profile_next_run():
        outputs = session.run(None, X)
    assert flush_profiles(timeout=60)
    reasons = [attrs(span).get(semconv.PROFILE_SKIP_REASON) for span in run_spans(profiling)]
    assert reasons == ["internal_error", "twin_not_ready", None]
    assert np.array_equal(expected[0], outputs[0])


def test_three_failed_primings_end_a_twin_until_another_profiler_tries(
    telemetry: Telemetry, profile_dir: Path
) -> None:
    """A twin whose priming run fails (not over inputs ORT refuses up front) is tried again
    with the next selected run's inputs, three times in all; then the session says why it is
    not profiled. Re-instrumenting gives it three new attempts."""
    session_bytes = reshape_model()
    x = np.ones(4, np.float32)
    bad, good = ({"x": x, "s": np.array(s, np.int64)} for s in ([3, 3], [2, 2]))

    def selected(feeds: dict[str, Any]) -> None:
        with profile_next_run(), contextlib.suppress(Fail):
            session.run(None, feeds)
        assert flush_profiles(timeout=60)

    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        session = ort.InferenceSession(session_bytes, providers=CPU)
        for _ in range(3):
            selected(bad)
        selected(good)
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        for feeds in (bad, good, good):
            selected(feeds)
    reasons = [attrs(span).get(semconv.PROFILE_SKIP_REASON) for span in run_spans(telemetry)]
    assert reasons == [semconv.SKIP_TWIN_NOT_READY] * 3 + [semconv.SKIP_TWIN_UNAVAILABLE] + [
        semconv.SKIP_TWIN_NOT_READY
    ] * 2 + [None]
    detail = attrs(run_spans(telemetry)[3])[semconv.PROFILE_SKIP_DETAIL]
    assert str(detail).startswith("priming the twin failed 3 times, last: ")


def test_a_run_after_shutdown_says_profiling_was_shut_down(
    profiling: Telemetry, mlp_path: Path
) -> None:
    """At exit the profiler shuts down before the interpreter's threads stop: their later
    selected runs run normally and say why they were not profiled."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    ready(session, X)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    profiler.shutdown(timeout=10)  # as before the interpreter's atexit handlers
    with profile_next_run():
        session.run(None, X)
    run = attrs(run_spans(profiling)[-1])
    assert run[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_UNAVAILABLE
    assert run[semconv.PROFILE_SKIP_DETAIL] == "otel-ort's profiling was shut down"

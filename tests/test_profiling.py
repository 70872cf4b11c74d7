"""Run-level profiling by ORT itself, on the user's own session: real ORT sessions, real
profile files, real span trees."""

from __future__ import annotations

import ast
import gc
import json
import logging
import os
import random
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi import _pybind_state as ort_c
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run, sampling, semconv
from otel_ort.failures import failure_counts
from otel_ort.instrumentation import wait_for_profiles
from otel_ort.profiling import conversion_job, recorded_options
from otel_ort.profiling.run_options import run_profiling_switch
from otel_ort.profiling.store import ProfileDirError
from otel_ort.sampling import Always, EveryNth, Never, ProfileSampler, Ratio
from tests.conftest import Telemetry, attrs, held_runs, instrumentation, run_threads
from tests.helpers.kept_files import kept_document
from tests.helpers.models import string_model, typed_cases
from tests.helpers.perf_models import matmul_chain

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
    return sorted(directory.glob("otel-ort_*.json.gz"))


def raw_files(directory: Path) -> list[Path]:
    """What ORT wrote that was not converted (or deleted) yet."""
    return sorted((directory / ".pending").glob("*.json"))


def profiled_run_counts() -> dict[str, int]:
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    counts: dict[str, int] = profiler.counts()
    return counts


@pytest.fixture(autouse=True, scope="module")
def _switch_found() -> None:
    """This process's run-profiling switch found before any test instruments ORT (its probe
    runs once per process); ``test_the_probe_is_not_the_users`` checks it instrumented."""
    run_profiling_switch()


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    return tmp_path / "profiles"


@pytest.fixture
def profiling(telemetry: Telemetry, profile_dir: Path) -> Iterator[Telemetry]:
    """Instrumented; no run is sampled, so tests force the runs they want profiled."""
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        yield telemetry


def test_the_first_forced_run_is_profiled(
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

    plain, *profiled = run_spans(profiling)
    assert attrs(plain)[semconv.RUN_PROFILED] is False
    assert [attrs(s)[semconv.RUN_PROFILED] for s in profiled] == [True, True]
    assert not any(semconv.PROFILE_SKIP_REASON in attrs(s) for s in run_spans(profiling))
    paths = [Path(str(attrs(s)[semconv.PROFILE_FILE])) for s in profiled]
    assert profile_files(profile_dir) == sorted(paths)
    assert [p.name[-10:] for p in paths] == ["-1.json.gz", "-2.json.gz"]  # the first run takes 1
    for span, path in zip(profiled, paths, strict=True):
        run = attrs(span)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert run[semconv.PROFILE_OVERLAPPING_RUNS] == 0
        nodes = children_of(profiling, span)
        assert len(nodes) == run[semconv.RUN_NODE_COUNT] > 0
        for node in nodes:
            assert node.context.trace_id == span.context.trace_id
            assert span.start_time and span.end_time and node.start_time and node.end_time
            assert span.start_time <= node.start_time <= node.end_time <= span.end_time
        document = kept_document(path)
        assert document["otherData"]["trace_id"] == f"{span.context.trace_id:032x}"
        assert document["otherData"]["span_id"] == f"{span.context.span_id:016x}"
    assert stat.S_IMODE(profile_dir.stat().st_mode) == 0o700
    for outputs in (first, second):
        assert all(
            np.array_equal(a, b) and a.dtype == b.dtype
            for a, b in zip(expected, outputs, strict=True)
        )
    assert not raw_files(profile_dir)  # ORT's raw files are gone
    assert profiled_run_counts() == {"profiled": 2}


def test_profiled_outputs_are_bitwise_those_of_ort(profiling: Telemetry) -> None:
    for model, feeds in typed_cases():
        session = ort.InferenceSession(model, providers=CPU)
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
    """A fresh session's first 400 runs: none is lost to a session not ready yet."""
    monkeypatch.setattr(sampling, "_draw", random.Random(4).random)  # no 0.1% flake
    for sampler, low, high in ((Ratio(0.25), 72, 129), (EveryNth(10), 40, 40)):
        telemetry.exporter.clear()
        with instrumentation(
            **telemetry.providers, profile_sampler=sampler, profile_dir=str(tmp_path / "p")
        ):
            session = ort.InferenceSession(mlp_path, providers=CPU)
            for _ in range(400):
                session.run(None, X)
            assert flush_profiles(timeout=120)
            spans = run_spans(telemetry)
            assert len(spans) == 400
            assert not any(semconv.PROFILE_SKIP_REASON in attrs(s) for s in spans), sampler
            assert low <= len(profiled_spans(telemetry)) <= high, sampler
            if isinstance(sampler, EveryNth):
                numbers = [i for i, s in enumerate(spans, 1) if attrs(s)[semconv.RUN_PROFILED]]
                assert numbers == list(range(10, 401, 10))


def test_three_threads_two_profiled_two_files_two_trees(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
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
        document = kept_document(str(attrs(span)[semconv.PROFILE_FILE]))
        events = [e for e in document["traceEvents"] if e["ph"] == "X"]
        assert sum(e["name"] == "model_run" for e in events) == 1
        node_events = [e for e in events if e["cat"] == "Node"]
        assert len(node_events) == nodes_per_run  # its own run's nodes, no other's
        assert len({e["tid"] for e in node_events}) == 1  # all on its own caller's thread
        nodes = children_of(profiling, span)
        assert len(nodes) == attrs(span)[semconv.RUN_NODE_COUNT] == nodes_per_run
        assert 0 <= int(attrs(span)[semconv.PROFILE_OVERLAPPING_RUNS]) <= 2
    assert {node_thread(s) for s in spans} == {thread_ids["t1"], thread_ids["t3"]}


def node_thread(span: ReadableSpan) -> int:
    document = kept_document(str(attrs(span)[semconv.PROFILE_FILE]))
    return int(next(e["tid"] for e in document["traceEvents"] if e.get("cat") == "Node"))


@pytest.mark.parametrize("forced", [False, True], ids=["sampled", "sampled and forced"])
def test_session_level_profiling_of_the_user_is_left_alone(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path, tmp_path: Path, forced: bool
) -> None:
    expected = ort.InferenceSession(mlp_path, providers=CPU).run(None, X)
    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), profile_sampler=EveryNth(3)
    ):
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / "user")
        session = ort.InferenceSession(mlp_path, options, providers=CPU)
        if forced:  # forced runs are not the sampler's to count
            with profile_next_run():
                session.run(None, X)
        outputs = [session.run(None, X) for _ in range(4)]  # the third is sampled
        assert flush_profiles(timeout=60)
        user_file = Path(session.end_profiling())
    assert all(np.array_equal(o[0], expected[0]) for o in outputs)
    user_events = json.loads(user_file.read_text())
    # the user's file holds every run of the session; otel-ort profiled none of them
    assert sum(e["name"] == "model_run" for e in user_events) == 4 + forced
    assert not profile_files(profile_dir)
    assert not profiled_spans(telemetry)
    spans = run_spans(telemetry)
    selected = [s for s in spans if semconv.PROFILE_SKIP_REASON in attrs(s)]
    assert len(selected) == 1 + forced
    for span in selected:
        assert attrs(span)[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_SESSION_PROFILING
        assert "enable_profiling" in str(attrs(span)[semconv.PROFILE_SKIP_DETAIL])
    assert spans.index(selected[-1]) == 2 + forced  # the third sampled run


def test_every_run_method_is_profiled_with_orts_outputs(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Every run API, inputs only ORT's Python API converts (lists) and RunOptions settings
    are profiled: ORT profiles the run on the session itself."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    expected = session.run(None, X)[0]
    output = session.get_outputs()[0].name
    got: dict[str, Any] = {}

    with profile_next_run():
        values = session.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(X["x"])})
    got["run_with_ort_values"] = values[0].numpy()

    binding = session.io_binding()
    binding.bind_cpu_input("x", X["x"])
    binding.bind_output(output)
    with profile_next_run():
        session.run_with_iobinding(binding)
    got["run_with_iobinding"] = binding.copy_outputs_to_cpu()[0]

    feeds = ort_c.OrtValueVector()
    feeds.push_back(ort.OrtValue.ortvalue_from_numpy(X["x"])._ortvalue)
    fetches = ort_c.OrtValueVector()
    cpu = ort_c.OrtDevice(ort_c.OrtDevice.cpu(), ort_c.OrtDevice.default_memory(), 0)
    with profile_next_run():
        session.run_with_ortvaluevector(ort.RunOptions(), ["x"], feeds, [output], fetches, [cpu])
    got["run_with_ortvaluevector"] = fetches[0].numpy()

    done = threading.Event()
    called_back: list[tuple[Any, str]] = []

    def callback(results: Any, user_data: Any, error: str) -> None:
        called_back.append((results, error))
        done.set()

    with profile_next_run():
        session.run_async(None, X, callback, None)
    assert done.wait(timeout=30)
    (results, error), *_ = called_back
    assert error == ""
    got["run_async"] = results[0]

    with profile_next_run():
        got["run"] = session.run(None, {"x": X["x"].tolist()})[0]  # ORT converts lists
    only_path = ort.RunOptions()
    only_path.only_execute_path_to_fetches = True
    with profile_next_run():
        got["only_execute_path_to_fetches"] = session.run([output], X, only_path)[0]
    assert flush_profiles(timeout=60)

    for name, outputs in got.items():
        assert outputs.dtype == expected.dtype and outputs.tobytes() == expected.tobytes(), name
    spans = run_spans(profiling)[1:]
    assert [attrs(s)[semconv.RUN_METHOD] for s in spans] == [
        "run_with_ort_values",
        "run_with_iobinding",
        "run_with_ortvaluevector",
        "run_async",
        "run",
        "run",
    ]
    for span in spans:
        run = attrs(span)
        assert run[semconv.RUN_PROFILED] is True, run.get(semconv.PROFILE_SKIP_DETAIL)
        assert Path(str(run[semconv.PROFILE_FILE])).is_file()
        assert len(children_of(profiling, span)) == run[semconv.RUN_NODE_COUNT] > 0
    assert len(profile_files(profile_dir)) == len(spans)
    assert profiled_run_counts() == {"profiled": len(spans)}


def test_run_options_made_before_instrument_say_why_they_are_not_profiled(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Their config entries cannot be listed, so they cannot be copied whole: made before
    instrument(), or in an earlier instrument() (changes meanwhile were not seen)."""
    early = ort.RunOptions()
    early.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        earlier_instrument = ort.RunOptions()
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        expected = session.run(None, X)[0]
        for run_options in (early, earlier_instrument):
            with profile_next_run():
                outputs = session.run(None, X, run_options)
            assert outputs[0].tobytes() == expected.tobytes()
        assert flush_profiles(timeout=60)
        counts = profiled_run_counts()
    skipped = run_spans(telemetry)[1:]
    assert [attrs(s)[semconv.PROFILE_SKIP_REASON] for s in skipped] == [
        semconv.SKIP_RUN_OPTIONS
    ] * 2
    assert "created before instrument()" in str(attrs(skipped[0])[semconv.PROFILE_SKIP_DETAIL])
    assert not profile_files(profile_dir)
    assert counts == {semconv.SKIP_RUN_OPTIONS: 2}


def test_run_options_that_are_not_a_run_options_are_orts_to_refuse(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with pytest.raises(TypeError) as plain:
        session.run(None, X, {"terminate": False})
    with profile_next_run(), pytest.raises(TypeError) as profiled:
        session.run(None, X, {"terminate": False})
    assert str(profiled.value) == str(plain.value)
    span = run_spans(profiling)[-1]
    assert attrs(span)[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_VALUE
    assert attrs(span)[semconv.PROFILE_SKIP_DETAIL] == "run_options is a dict"
    assert attrs(span)[semconv.ERROR_TYPE] == "TypeError"
    assert not profile_files(profile_dir)


def test_run_with_ortvaluevector_without_run_options_is_orts_to_refuse(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Its ``run_options`` is required (ORT raises TypeError on None): a selected run raises
    the same, rather than running with otel-ort's RunOptions in its place."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    cpu = ort_c.OrtDevice(ort_c.OrtDevice.cpu(), ort_c.OrtDevice.default_memory(), 0)

    def call() -> None:
        feeds = ort_c.OrtValueVector()
        feeds.push_back(ort.OrtValue.ortvalue_from_numpy(X["x"])._ortvalue)
        session.run_with_ortvaluevector(None, ["x"], feeds, ["y"], ort_c.OrtValueVector(), [cpu])

    with pytest.raises(TypeError) as plain:
        call()
    with profile_next_run(), pytest.raises(TypeError) as profiled:
        call()
    addresses = re.compile(r" at 0x[0-9a-f]+")  # the call's own objects
    assert addresses.sub("", str(profiled.value)) == addresses.sub("", str(plain.value))
    assert flush_profiles(timeout=10)
    assert not profiled_spans(profiling) and not profile_files(profile_dir)


def run_options_state(run_options: ort.RunOptions) -> tuple[Any, ...]:
    return (
        run_options.logid,
        run_options.log_severity_level,
        run_options.log_verbosity_level,
        run_options.only_execute_path_to_fetches,
        run_options.terminate,
        run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage"),
    )


def test_the_callers_run_options_are_copied_not_modified(
    profiling: Telemetry,
    profile_dir: Path,
    mlp_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A RunOptions set up after instrument() (config entry included) is profiled; the
    caller's object stays as it was: its later unselected runs profile nothing."""
    monkeypatch.chdir(tmp_path)  # where ORT's default run profile prefix would write
    session = ort.InferenceSession(mlp_path, providers=CPU)
    run_options = ort.RunOptions()
    run_options.logid = "the caller's own logid"
    run_options.log_severity_level = 3
    run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    before = run_options_state(run_options)
    expected = session.run(None, X, run_options)[0]
    with profile_next_run():
        profiled = session.run(None, X, run_options)[0]
    assert run_options_state(run_options) == before
    for _ in range(3):
        assert session.run(None, X, run_options)[0].tobytes() == expected.tobytes()
    assert flush_profiles(timeout=60)
    assert profiled.tobytes() == expected.tobytes()
    (span,) = profiled_spans(profiling)
    kept = Path(str(attrs(span)[semconv.PROFILE_FILE]))
    assert sorted(tmp_path.rglob("*.json*")) == [kept]  # the unselected runs wrote nothing
    assert run_options_state(run_options) == before


def test_a_profiled_run_that_ort_fails_raises_orts_error(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """The profiled run gets everything of the caller's RunOptions (its config entries and
    terminate flag too), so it fails as ORT's own run does: counted ``run_failed``, no file."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    bad_entry = ort.RunOptions()
    bad_entry.add_run_config_entry("memory.enable_memory_arena_shrinkage", "nodevice:0")
    terminated = ort.RunOptions()
    terminated.terminate = True
    cases: list[tuple[dict[str, Any], ort.RunOptions | None]] = [
        ({"x": X["x"].astype(np.float64)}, None),
        (X, bad_entry),
        (X, terminated),
    ]
    for feeds, run_options in cases:
        with pytest.raises(Exception) as plain:
            session.run(None, feeds, run_options)
        with profile_next_run(), pytest.raises(Exception) as profiled:
            session.run(None, feeds, run_options)
        assert type(profiled.value) is type(plain.value)
        assert str(profiled.value) == str(plain.value)
    assert flush_profiles(timeout=10)
    spans = run_spans(profiling)
    assert len(spans) == 6
    for span in spans:
        assert attrs(span)[semconv.RUN_PROFILED] is False
        assert semconv.PROFILE_SKIP_REASON not in attrs(span)
        assert attrs(span)[semconv.ERROR_TYPE] in {"InvalidArgument", "Fail", "RuntimeException"}
    assert profiled_run_counts() == {semconv.RUN_FAILED_OUTCOME: 3}
    assert not profile_files(profile_dir) and not raw_files(profile_dir)
    with profile_next_run():  # the session's gate was given back
        session.run(None, X)
    assert flush_profiles(timeout=60)
    assert attrs(run_spans(profiling)[-1])[semconv.RUN_PROFILED] is True


def test_a_session_created_before_instrument_is_profiled(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    expected = session.run(None, X)[0]
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        for _ in range(2):
            with profile_next_run():
                assert session.run(None, X)[0].tobytes() == expected.tobytes()
        assert flush_profiles(timeout=60)
    spans = run_spans(telemetry)
    assert [attrs(s)[semconv.RUN_PROFILED] for s in spans] == [True, True]
    for span in spans:
        assert len(children_of(telemetry, span)) == attrs(span)[semconv.RUN_NODE_COUNT] > 0
    assert len(profile_files(profile_dir)) == 2


def test_baggage_forces_a_profile(profiling: Telemetry, mlp_path: Path) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    token = otel_context.attach(baggage.set_baggage("onnxruntime.profile", "1"))
    try:
        session.run(None, X)
    finally:
        otel_context.detach(token)
    session.run(None, X)
    assert flush_profiles(timeout=60)
    assert [attrs(s)[semconv.RUN_PROFILED] for s in run_spans(profiling)] == [True, False]


def test_retention_and_counts(telemetry: Telemetry, tmp_path: Path, mlp_path: Path) -> None:
    directory = tmp_path / "kept"
    with instrumentation(
        **telemetry.providers,
        profile_sampler=Always(),
        profile_dir=str(directory),
        profile_max_files=2,
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        for _ in range(5):
            session.run(None, X)
        assert flush_profiles(timeout=60)
        counts = profiled_run_counts()
    assert len(profile_files(directory)) == 2
    assert counts == {"profiled": 5, "files_deleted": 3}
    points = {
        p.attributes[semconv.PROFILE_OUTCOME]: p.value
        for p in telemetry.points(semconv.METRIC_PROFILE_RUNS)
    }
    assert points == {"profiled": 5}
    assert sum(p.value for p in telemetry.points(semconv.METRIC_PROFILE_FILES_DELETED)) == 3


def test_a_kept_file_that_cannot_be_written_is_said_and_the_spans_still_go(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing the kept file fails (a full disk): the run span says so and the failure is
    counted; the node spans are still delivered, ORT's file is still deleted, and nothing
    is counted for retention."""

    def full_disk(data: bytes, path: str) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(conversion_job, "publish_kept", full_disk)
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    (span,) = profiled_spans(profiling)
    error = str(attrs(span)[semconv.PROFILE_ERROR])
    assert error.startswith("keeping the profile failed: OSError(28")
    assert children_of(profiling, span)
    assert profile_files(profile_dir) == [] and raw_files(profile_dir) == []
    assert profiled_run_counts() == {"profiled": 1, semconv.PROFILE_ERROR_OUTCOME: 1}


def test_every_instrument_is_made_once_from_the_meter_provider_given(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    """instrument()'s four instruments (otel_ort.metrics.Instruments) record into its meter
    provider, under the scope otel_ort, each with its unit and description: runs, profiled
    runs, node spans a shut-down processor could not take, files deleted by retention."""
    shut = BatchSpanProcessor(InMemorySpanExporter())
    shut.shutdown()  # type: ignore[no-untyped-call]
    telemetry.tracer_provider.add_span_processor(shut)  # it takes no span: each one is dropped
    with instrumentation(
        **telemetry.providers,
        profile_sampler=Always(),
        profile_dir=str(tmp_path),
        profile_max_files=1,
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        for _ in range(2):
            session.run(None, X)
        assert wait_for_profiles(60)  # (a flush would fail: the shut processor's)
        counts = profiled_run_counts()
    data = telemetry.metric_reader.get_metrics_data()
    assert data is not None
    found = {
        (scope.scope.name, metric.name): (metric.unit, metric.description)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert found == {
        ("otel_ort", semconv.METRIC_RUN_DURATION): (
            "s",
            "Duration of ONNX Runtime inference runs.",
        ),
        ("otel_ort", semconv.METRIC_PROFILE_RUNS): (
            "{run}",
            "Runs selected for profiling, by outcome.",
        ),
        ("otel_ort", semconv.METRIC_PROFILE_SPANS_DROPPED): (
            "{span}",
            "Profile spans that were dropped.",
        ),
        ("otel_ort", semconv.METRIC_PROFILE_FILES_DELETED): (
            "{file}",
            "Profile files deleted by retention.",
        ),
    }
    dropped = telemetry.points(semconv.METRIC_PROFILE_SPANS_DROPPED)
    assert counts["spans_dropped"] > 0 and sum(p.value for p in dropped) == counts["spans_dropped"]
    assert sum(p.value for p in telemetry.points(semconv.METRIC_PROFILE_FILES_DELETED)) == 1


def test_tensor_contents_never_reach_files_or_spans(
    profiling: Telemetry, profile_dir: Path
) -> None:
    session = ort.InferenceSession(string_model(), providers=CPU)
    feeds = {"s": np.array(["SECRET-VALUE-123"], dtype=object)}
    for _ in range(2):
        with profile_next_run():
            session.run(None, feeds)
    assert flush_profiles(timeout=60)
    assert len(profile_files(profile_dir)) == 2
    for path in profile_files(profile_dir):
        assert "SECRET-VALUE-123" not in json.dumps(kept_document(path))
    for span in profiling.spans():
        assert "SECRET-VALUE-123" not in repr(attrs(span))


def test_profile_mode_off_the_removed_modes_and_a_bad_profile_dir(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    with instrumentation(**telemetry.providers, profile_mode="off", profile_sampler=Always()):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        with profile_next_run():
            session.run(None, X)
        assert OrtInstrumentor()._profiler is None
    assert semconv.PROFILE_SKIP_REASON not in attrs(run_spans(telemetry)[0])
    assert attrs(run_spans(telemetry)[0])[semconv.RUN_PROFILED] is False
    for removed in ("twin", "serve"):
        with pytest.raises(ValueError, match="no longer uses a twin"):
            OrtInstrumentor().instrument(profile_mode=removed)
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


def test_the_worker_and_the_profilers_files_go_at_uninstrument(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """Profiling adds one thread (the worker) and leaves the session's own threads alone;
    uninstrument() takes the worker and every file descriptor of the profiler back."""
    run_profiling_switch()  # process-wide, found once: its probe session comes and goes first
    gc.collect()
    before = set(os.listdir("/proc/self/task"))
    fds = len(os.listdir("/proc/self/fd"))
    with instrumentation(**telemetry.providers, profile_dir=str(profile_dir)):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 3  # two pool threads
        session = ort.InferenceSession(mlp_path, options, providers=CPU)
        assert_new_threads(before, 2)
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
        assert_new_threads(before, 2 + 1)  # and the worker
        del session
        gc.collect()
        assert_new_threads(before, 1)  # the worker only
        kept = ort.InferenceSession(mlp_path, options, providers=CPU)
        with profile_next_run():
            kept.run(None, X)
        assert flush_profiles(timeout=60)
    assert_new_threads(before, 2)  # kept's own pool; the worker is gone
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds  # the profile store's lock too: closed
    assert len(profile_files(profile_dir)) == 2
    del kept  # does not keep the uninstrumented profiler alive
    gc.collect()
    assert_new_threads(before, 0)
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_session_collected_with_its_profile_pending_still_gets_its_tree(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """The session goes before the worker has converted its profiled run: the run's file and
    span tree still come."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    gate = threading.Event()
    assert profiler.worker.submit(lambda: gate.wait(60))  # holds the worker
    with profile_next_run():
        session.run(None, X)
    del session
    gc.collect()
    gate.set()
    assert flush_profiles(timeout=60)
    (span,) = profiled_spans(profiling)
    assert len(children_of(profiling, span)) == attrs(span)[semconv.RUN_NODE_COUNT] > 0
    assert Path(str(attrs(span)[semconv.PROFILE_FILE])).is_file()


def test_a_session_rebuilt_by_ort_is_still_profiled(profiling: Telemetry, mlp_path: Path) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with profile_next_run():
        session.run(None, X)
    session.set_providers(CPU)  # ORT re-creates the session
    with profile_next_run():
        outputs = session.run(None, X)
    assert flush_profiles(timeout=60)
    assert [attrs(s)[semconv.RUN_PROFILED] for s in run_spans(profiling)] == [True, True]
    assert (
        outputs[0].tobytes()
        == ort.InferenceSession(mlp_path, providers=CPU).run(None, X)[0].tobytes()
    )


def test_a_run_that_finds_profiling_shut_down_after_its_checks_says_so(
    profiling: Telemetry, mlp_path: Path
) -> None:
    """uninstrument() between a selected run's checks and its place in the worker's queue:
    'profiling_unavailable', not a full backlog."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with profile_next_run():  # the first: the switch is found, the session's gate passed
        session.run(None, X)
    assert flush_profiles(timeout=60)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    outputs: list[Any] = []
    run_options = ort.RunOptions()  # recorded: the copy reads it under the lock held below

    def selected_run() -> None:
        with profile_next_run():
            outputs.append(session.run(None, X, run_options))

    with recorded_options._recorded_lock:  # the run waits there, copying its RunOptions
        thread = threading.Thread(target=selected_run)
        thread.start()
        time.sleep(0.2)
        profiler.shutdown()
    thread.join()
    assert outputs and outputs[0][0].tobytes() == session.run(None, X)[0].tobytes()
    skipped = attrs(run_spans(profiling)[-2])
    assert skipped[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_UNAVAILABLE
    assert skipped[semconv.PROFILE_SKIP_DETAIL] == "otel-ort's profiling was shut down"


def test_a_profiled_run_has_the_sessions_own_nodes(profiling: Telemetry, mlp_path: Path) -> None:
    """The session's own optimization level and execution mode: nothing fused here."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.inter_op_num_threads = 2
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    (span,) = profiled_spans(profiling)
    op_types = {attrs(node)[semconv.NODE_OP_TYPE] for node in children_of(profiling, span)}
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
    with profile_next_run():
        session.run(None, X)
    pooled_options = ort.SessionOptions()
    pooled_options.intra_op_num_threads = 4
    pooled = ort.InferenceSession(mlp_path, pooled_options, providers=CPU)
    with profile_next_run():  # perf counts its pool threads, which the child does not have
        pooled.run(None, X)
    assert flush_profiles(timeout=60)
    profiling.exporter.clear()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, never return to pytest
        status = 1
        try:
            for _ in range(2):
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
            counts = profiled_run_counts()
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
    assert [reason for reason, _, _ in report] == [None, None]
    assert profiled == 2
    assert counts == {"profiled": 2}  # the child's own
    for _, path, task_clock in report:
        assert f"_{pid}-" in path  # named by the child: nothing shared with the parent
        assert task_clock > 0
    with profile_next_run():
        session.run(None, X)  # the parent still profiles its own runs
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
    run_options.terminate = True
    run_options.terminate = False
    assert run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    session = ort.InferenceSession(mlp_path, options, providers=CPU)
    assert session.run(None, X, run_options)[0].shape == (2, 32)


def long_run_session() -> tuple[ort.InferenceSession, dict[str, Any]]:
    """A session whose run takes most of a second on one thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(matmul_chain(nodes=256), options, providers=CPU)
    return session, {"x": np.ones((512, 512), np.float32)}


def test_run_options_terminate_ends_a_profiled_run_as_it_ends_orts_own(
    profiling: Telemetry, profile_dir: Path
) -> None:
    """``terminate`` set on the caller's RunOptions from another thread while the profiled
    run (with otel-ort's copy) runs: it ends, with ORT's own exception."""
    session, feeds = long_run_session()
    with profile_next_run():  # the session's first profiled run, out of the way
        session.run(None, {"x": np.zeros((512, 512), np.float32)})
    run_options = ort.RunOptions()
    timer = threading.Timer(0.05, lambda: setattr(run_options, "terminate", True))
    started = time.monotonic()
    timer.start()
    with profile_next_run(), pytest.raises(Exception, match="terminate flag") as caught:
        session.run(None, feeds, run_options)
    timer.join()
    assert time.monotonic() - started < 0.5  # ended early, not at the run's end
    assert type(caught.value).__module__.startswith("onnxruntime")
    assert flush_profiles(timeout=60)
    span = attrs(run_spans(profiling)[-1])
    assert span[semconv.RUN_PROFILED] is False and span[semconv.ERROR_TYPE]
    assert profiled_run_counts() == {"profiled": 1, semconv.RUN_FAILED_OUTCOME: 1}
    assert len(profile_files(profile_dir)) == 1 and not raw_files(profile_dir)


def test_terminate_still_reaches_a_profiled_run_that_uninstrument_waits_for(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    instrumentor = OrtInstrumentor()
    instrumentor.instrument(**telemetry.providers, profile_dir=str(profile_dir))
    try:
        session = ort.InferenceSession(mlp_path, providers=CPU)
        with profile_next_run():  # the session's first profiled run, out of the way
            session.run(None, X)
        waiting, go = held_runs(session)
        run_options = ort.RunOptions()
        errors: list[BaseException] = []

        def profiled_run() -> None:
            try:
                with profile_next_run():
                    session.run(None, X, run_options)
            except Exception as exc:
                errors.append(exc)

        caller = threading.Thread(target=profiled_run)
        caller.start()
        assert waiting.wait(timeout=30)
    finally:
        stopping = threading.Thread(target=instrumentor.uninstrument)
        stopping.start()
    stopping.join(timeout=0.5)
    assert stopping.is_alive()  # uninstrument() waits for the profiled run in flight
    run_options.terminate = True
    go.set()
    caller.join(timeout=60)
    stopping.join(timeout=60)
    assert len(errors) == 1 and "terminate flag" in str(errors[0])


def test_a_response_hook_may_flush_profiles_during_a_profiled_run(
    telemetry: Telemetry, profile_dir: Path, mlp_path: Path
) -> None:
    """The hook runs before the run is handed to the worker: a flush there does not wait for
    that run (it cannot), and returns at once rather than at its timeout."""
    flushed: list[bool] = []

    def response_hook(span: Any, session: Any, outputs: Any) -> None:
        started = time.monotonic()
        flushed.append(flush_profiles(timeout=30) and time.monotonic() - started < 10)

    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), response_hook=response_hook
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        for _ in range(2):
            with profile_next_run():
                session.run(None, X)
        assert flush_profiles(timeout=60)
    assert flushed == [True, True]
    assert [attrs(s)[semconv.RUN_PROFILED] for s in run_spans(telemetry)] == [True, True]


class Interrupting:
    """ORT's C++ session, whose run is interrupted (KeyboardInterrupt) once it has run."""

    def __init__(self, sess: Any) -> None:
        self._sess = sess

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)

    def run(self, *args: Any) -> Any:
        self._sess.run(*args)
        raise KeyboardInterrupt


def test_an_interrupted_profiled_run_ends_its_span_and_gives_its_place_back(
    profiling: Telemetry, profile_dir: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ort.InferenceSession(mlp_path, providers=CPU)
    monkeypatch.setattr(session, "_sess", Interrupting(session._sess))
    with profile_next_run(), pytest.raises(KeyboardInterrupt):
        session.run(None, X)
    monkeypatch.undo()
    assert flush_profiles(timeout=5)  # no reservation left behind
    span = run_spans(profiling)[-1]
    assert attrs(span)[semconv.ERROR_TYPE] == "KeyboardInterrupt"
    assert not raw_files(profile_dir) and not profile_files(profile_dir)  # ORT's file is gone
    assert profiled_run_counts() == {semconv.RUN_FAILED_OUTCOME: 1}
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(session.run(None, X)))
    runner.start()  # not held back by the session's gate
    runner.join(timeout=30)
    assert outcome
    with profile_next_run():
        session.run(None, X)
    assert flush_profiles(timeout=60)
    assert attrs(run_spans(profiling)[-1])[semconv.RUN_PROFILED] is True


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

    def response_hook(span: Any, session: Any, outputs: Any) -> None:
        raise KeyboardInterrupt

    with instrumentation(
        **telemetry.providers, profile_dir=str(profile_dir), response_hook=response_hook
    ):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        with profile_next_run(), pytest.raises(KeyboardInterrupt):
            session.run(None, X)
        assert flush_profiles(timeout=5)  # not its timeout: no place is left reserved
    span = run_spans(telemetry)[-1]
    assert attrs(span)[semconv.RUN_PROFILED] is True
    assert len(children_of(telemetry, span)) == attrs(span)[semconv.RUN_NODE_COUNT] > 0
    assert len(profile_files(profile_dir)) == 1


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
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
    [path] = profile_files(profile_dir)
    document = kept_document(path)
    runs = [e for e in document["traceEvents"] if e.get("name") == "model_run"]
    assert runs and not any("trace_id" in e["args"] or "span_id" in e["args"] for e in runs)
    assert "trace_id" not in document["otherData"] and "span_id" not in document["otherData"]


def test_a_run_after_shutdown_says_profiling_was_shut_down(
    profiling: Telemetry, mlp_path: Path
) -> None:
    """At exit the profiler shuts down before the interpreter's threads stop: their later
    selected runs run normally and say why they were not profiled."""
    session = ort.InferenceSession(mlp_path, providers=CPU)
    with profile_next_run():
        session.run(None, X)
    profiler = OrtInstrumentor()._profiler
    assert profiler is not None
    profiler.shutdown(timeout=10)  # as before the interpreter's atexit handlers
    with profile_next_run():
        outputs = session.run(None, X)
    assert outputs[0].shape == (2, 32)
    first, last = (attrs(s) for s in run_spans(profiling))
    assert first[semconv.RUN_PROFILED] is True
    assert last[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_UNAVAILABLE
    assert last[semconv.PROFILE_SKIP_DETAIL] == "otel-ort's profiling was shut down"


PROBE_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run

model, directory, sampler = sys.argv[1:]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
OrtInstrumentor().instrument(
    tracer_provider=provider, profile_dir=directory, profile_sampler=sampler
)
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
for _ in range(3):
    with profile_next_run():
        session.run(None, {"x": np.ones((2, 32), np.float32)})
assert flush_profiles(timeout=60)
print([(s.name, (s.attributes or {}).get("onnxruntime.run.profiled"))
       for s in exporter.get_finished_spans()])
"""


@pytest.mark.parametrize("sampler", ["never", "always"])
def test_a_fresh_process_profiles_its_first_selected_run(
    tmp_path: Path, mlp_path: Path, sampler: str
) -> None:
    """The first selected run of a process finds how to switch run-level profiling on, with
    a probe session of otel-ort's, while the user's session is alive: the probe is neither
    traced as the user's nor selected by a sampler that selects every run."""
    script = [PROBE_SCRIPT, str(mlp_path), str(tmp_path / "p"), sampler]
    completed = subprocess.run(
        [sys.executable, "-c", *script], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    spans: list[tuple[str, bool | None]] = ast.literal_eval(completed.stdout.splitlines()[-1])
    names = [name for name, _ in spans]
    assert names.count(semconv.SPAN_SESSION_CREATE) == 1, completed.stderr[-2000:]
    runs = [profiled for name, profiled in spans if name == semconv.SPAN_RUN]
    assert runs == [True] * 3, completed.stderr[-2000:]
    assert len(list((tmp_path / "p").glob("otel-ort_*.json.gz"))) == 3

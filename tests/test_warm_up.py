"""Twin mode's warm-up: the run before one the sampler expects to profile executes on the twin,
so the profiled run finds it warm. Real sessions; the user's session is watched, not replaced."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from opentelemetry import trace as trace_api

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.failures import failure_counts
from otel_ort.sampling import EveryNth, ProfileSampler
from tests.conftest import Telemetry, attrs, instrumentation
from tests.perf_models import matmul_chain
from tests.test_serve_mode import same, watched

CPU = ["CPUExecutionProvider"]
X = {"x": np.arange(2 * 32, dtype=np.float32).reshape(2, 32) / 64}


def run_marks(telemetry: Telemetry) -> list[str]:
    """Per run span, in order: "profiled", "warm-up", the skip reason, or "" (ORT's run)."""
    marks = []
    for span in sorted(telemetry.spans(semconv.SPAN_RUN), key=lambda s: s.start_time or 0):
        values = attrs(span)
        if values.get(semconv.RUN_PROFILED):
            marks.append("profiled")
        elif values.get(semconv.PROFILE_WARMUP):
            marks.append("warm-up")
        else:
            marks.append(str(values.get(semconv.PROFILE_SKIP_REASON, "")))
    return marks


def test_the_run_before_a_profiled_one_runs_on_the_twin_with_bitwise_equal_outputs(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    """EveryNth(3) profiles runs 3, 6, 9 and knows each one run ahead: runs 5 and 8 go to the
    (then ready) twin; run 2 cannot, as no twin is built before run 3 asks for one."""
    options = dict(profile_sampler=EveryNth(3), profile_dir=str(tmp_path / "profiles"))
    with instrumentation(**telemetry.providers, **options):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        expected = session.run(None, X)
        session.run(None, X)
        session.run(None, X)  # selected: asks for the twin
        assert flush_profiles(timeout=60)
        session_runs = watched(session)
        for _ in range(6):
            assert same(session.run(None, X), expected)
        assert flush_profiles(timeout=60)
    assert session_runs.runs == 2  # runs 4 and 7
    assert run_marks(telemetry) == [
        "", "", semconv.SKIP_TWIN_NOT_READY, "", "warm-up", "profiled", "", "warm-up", "profiled",
    ]  # fmt: skip


class Announcing(ProfileSampler):
    """Profiles no run, yet always says the next one will be."""

    def should_profile(self, span_context: trace_api.SpanContext) -> bool:
        return False

    def profiles_next(self, span_context: trace_api.SpanContext) -> bool:
        return True


class Silent(ProfileSampler):
    """Profiles every second run and, as a sampler written before hints, says nothing ahead."""

    def __init__(self) -> None:
        self.asked = 0

    def should_profile(self, span_context: trace_api.SpanContext) -> bool:
        self.asked += 1
        return self.asked % 2 == 0


def ready_twin(session: ort.InferenceSession) -> list[Any]:
    """Build and prime ``session``'s twin (a forced run, not profiled: its outputs are ORT's,
    returned), and wait for it."""
    with profile_next_run():
        outputs: list[Any] = session.run(None, X)
    assert flush_profiles(timeout=60)
    twin = session.__dict__["_otel_ort_twin"]
    assert twin.state == "ready", twin.reason
    return outputs


@contextmanager
def ready_session(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path, sampler: ProfileSampler
) -> Iterator[tuple[ort.InferenceSession, list[Any]]]:
    """An instrumented session of the MLP profiled by ``sampler``, its twin ready; and ORT's
    outputs for ``X``."""
    options = dict(profile_sampler=sampler, profile_dir=str(tmp_path / "profiles"))
    with instrumentation(**telemetry.providers, **options):
        session = ort.InferenceSession(mlp_path, providers=CPU)
        yield session, ready_twin(session)


def test_no_warm_up_without_a_hint_before_forced_or_silent_samplers_runs(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    with ready_session(telemetry, tmp_path, mlp_path, Silent()) as (session, _):
        for _ in range(4):
            session.run(None, X)
        with profile_next_run():
            session.run(None, X)
        assert flush_profiles(timeout=60)
    assert "warm-up" not in run_marks(telemetry)
    assert run_marks(telemetry).count("profiled") == 3  # 2 sampled, 1 forced


def test_a_session_profiling_itself_gets_no_warm_up(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    """Its own profile file must hold every run that otel-ort does not profile."""
    options = dict(profile_sampler=Announcing(), profile_dir=str(tmp_path / "profiles"))
    with instrumentation(**telemetry.providers, **options):
        session_options = ort.SessionOptions()
        session_options.enable_profiling = True
        session_options.profile_file_prefix = str(tmp_path / "own")
        session = ort.InferenceSession(mlp_path, session_options, providers=CPU)
        ready_twin(session)
        session_runs = watched(session)
        for _ in range(3):
            session.run(None, X)
        session.end_profiling()
    assert session_runs.runs == 3
    assert "warm-up" not in run_marks(telemetry)


def test_warm_ups_that_the_twin_cannot_take_go_to_the_session(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    """A run ORT refuses fails on the twin, then raises ORT's own error (counted as a fallback);
    a call whose options the twin cannot reproduce goes straight to ORT."""
    with ready_session(telemetry, tmp_path, mlp_path, Announcing()) as (session, expected):
        session_runs = watched(session)
        assert same(session.run(None, X), expected)
        only_path = ort.RunOptions()
        only_path.only_execute_path_to_fetches = True  # the C API cannot set it
        assert same(session.run(None, X, only_path), expected)
        with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
            session.run(None, {"x": X["x"].astype(np.float64)})
    assert session_runs.runs == 2
    assert run_marks(telemetry)[-3:] == ["warm-up", "", ""]
    assert sum(p.value for p in telemetry.points(semconv.METRIC_SERVE_FALLBACKS)) == 1


def test_a_warm_up_leaves_the_next_profiled_runs_perf_counts_its_own(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """perf on (its default, software events here): the twin's pool counts stay on, and a
    warm-up's are set aside, so the profiled run's time between nodes is not the warm-up's
    pool work (a third of its total, were it kept: spinning off, nothing else runs there)."""
    options = dict(
        profile_sampler=EveryNth(2), profile_dir=str(tmp_path / "profiles"),
        perf_events=["task-clock"],
    )  # fmt: skip
    feeds = {"x": np.ones((512, 512), np.float32)}
    with instrumentation(**telemetry.providers, **options):
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = 2
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(matmul_chain(), session_options, providers=CPU)
        session.run(None, feeds)
        session.run(None, feeds)  # selected: asks for the twin
        assert flush_profiles(timeout=60)
        for _ in range(6):  # warm-up, profiled, three times
            session.run(None, feeds)
        assert flush_profiles(timeout=60)
    assert run_marks(telemetry)[-6:] == ["warm-up", "profiled"] * 3
    profiled = [
        attrs(s) for s in telemetry.spans(semconv.SPAN_RUN) if attrs(s).get(semconv.RUN_PROFILED)
    ]
    for values in profiled:
        assert values["perf.threads"] == 2
        between, total = values["perf.between_nodes.task-clock"], values["perf.task-clock"]
        assert between < 0.15 * total, (between, total)


def test_no_warm_up_while_a_profiled_run_holds_the_twins_pool(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    """Its counts must be its own: the run goes to the session instead."""
    with ready_session(telemetry, tmp_path, mlp_path, Announcing()) as (session, _):
        pool = session.__dict__["_otel_ort_twin"].pool
        assert pool is not None and pool.stays_on  # perf's defaults: software events here
        session_runs = watched(session)
        with pool.lock:
            session.run(None, X)
        session.run(None, X)
    assert session_runs.runs == 1
    assert run_marks(telemetry)[-2:] == ["", "warm-up"]


def test_a_hint_that_raises_is_reported_and_the_run_goes_to_the_session(
    telemetry: Telemetry, tmp_path: Path, mlp_path: Path
) -> None:
    class Broken(Announcing):
        def profiles_next(self, span_context: trace_api.SpanContext) -> bool:
            raise ValueError("hint bug")

    before = failure_counts().get("profile_sampler raised", 0)
    with ready_session(telemetry, tmp_path, mlp_path, Broken()) as (session, expected):
        session_runs = watched(session)
        outputs: Any = session.run(None, X)
    assert same(outputs, expected) and session_runs.runs == 1
    assert failure_counts()["profile_sampler raised"] == before + 1

"""The CUDA execution provider: profiled runs of the user's own CUDA sessions, against ORT's
own runs.

These need onnxruntime-gpu and an NVIDIA GPU, and are skipped elsewhere, saying which is
missing. CI has neither. To run them on a GPU machine: ``pip install onnxruntime-gpu`` in
place of onnxruntime, then ``pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.failures import failure_counts
from otel_ort.sampling import Ratio
from tests.conftest import CUDA, Telemetry, attrs, cuda_missing, hammer, instrumentation
from tests.helpers.models import typed_cases
from tests.helpers.perf_models import matmul_chain
from tests.helpers.profiled_runs import check_case, difference

X = {"x": np.random.default_rng(3).standard_normal((512, 512)).astype(np.float32)}


pytestmark = pytest.mark.skipif(cuda_missing() is not None, reason=str(cuda_missing()))


def test_profiled_cuda_runs_return_ort_outputs_and_node_spans(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    cases = [(matmul_chain(nodes=8, size=512), X), *typed_cases()]
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        for model, feeds in cases:
            session = ort.InferenceSession(model, providers=CUDA)
            assert check_case(telemetry, session, feeds) == "profiled"
    providers = {attrs(s).get(semconv.NODE_PROVIDER) for s in telemetry.spans()}
    assert "CUDAExecutionProvider" in providers, providers


def cuda_stream() -> int:
    """A new CUDA stream, from the CUDA runtime that ORT's CUDA provider loaded."""
    with open("/proc/self/maps") as maps:
        runtime = next(line.split()[-1] for line in maps if "/libcudart.so" in line)
    stream = ctypes.c_void_p()
    assert ctypes.CDLL(runtime).cudaStreamCreate(ctypes.byref(stream)) == 0
    return int(stream.value or 0)


def test_a_session_on_a_stream_of_its_users_is_profiled(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """No copy of the session: whatever the user configured is what runs, profiled."""
    model = matmul_chain(nodes=4, size=256)
    ort.InferenceSession(model, providers=CUDA)  # loads the CUDA runtime
    options = {"user_compute_stream": str(cuda_stream())}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(
            model, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"]
        )
        feeds = {"x": np.ones((256, 256), np.float32)}
        want = session.run(None, feeds)
        with profile_next_run():
            got = session.run(None, feeds)
        assert flush_profiles(timeout=60)
    assert attrs(telemetry.spans(semconv.SPAN_RUN)[-1])[semconv.RUN_PROFILED]
    assert difference(want, got) is None


def test_a_session_replaying_cuda_graphs_is_left_alone(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """A replayed run executes no node: nothing to profile, and the run is not touched."""
    model = matmul_chain(nodes=4, size=256)
    graphs = [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), "CPUExecutionProvider"]
    feeds = {"x": np.ones((256, 256), np.float32)}
    plain = ort.InferenceSession(model, providers=graphs)
    want = [plain.run(None, feeds) for _ in range(3)]
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(model, providers=graphs)
        got = [session.run(None, feeds)]
        for _ in range(2):
            with profile_next_run():
                got.append(session.run(None, feeds))
    assert [difference(w, g) for w, g in zip(want, got, strict=True)] == [None] * 3
    skipped = [attrs(s) for s in telemetry.spans(semconv.SPAN_RUN)][-2:]
    assert [s[semconv.PROFILE_SKIP_REASON] for s in skipped] == [semconv.SKIP_CUDA_GRAPH] * 2


def test_threads_on_one_cuda_session_each_profiled_run_has_its_file(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    session_model = matmul_chain(nodes=8, size=256)
    feeds = {"x": np.ones((256, 256), np.float32)}
    failures_before = failure_counts()
    with instrumentation(
        **telemetry.providers,
        profile_dir=str(tmp_path),
        profile_sampler=Ratio(0.2),
        profile_max_files=10_000,
    ):
        session = ort.InferenceSession(session_model, providers=CUDA)
        failed = hammer(session, feeds, threads=4, seconds=5)
        assert flush_profiles(timeout=60)
    assert not failed, failed[:3]
    assert failure_counts() == failures_before
    runs = [attrs(s) for s in telemetry.spans(semconv.SPAN_RUN)]
    files = [run[semconv.PROFILE_FILE] for run in runs if run.get(semconv.RUN_PROFILED)]
    assert len(files) > 5 and len(set(files)) == len(files)
    assert all(Path(f).exists() for f in files)

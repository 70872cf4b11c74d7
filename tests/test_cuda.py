"""The CUDA execution provider: C-API sessions and twins on CUDA, against ORT's own runs.

These need onnxruntime-gpu and an NVIDIA GPU, and are skipped elsewhere, saying which is
missing. CI has neither: there, the CPU wheel's refusal of CUDA is tested (test_capi). To run
them on a GPU machine: ``pip install onnxruntime-gpu`` in place of onnxruntime, then
``pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import ctypes
import glob
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.capi import CSession, OrtError
from otel_ort.failures import failure_counts
from otel_ort.profiling import read_profile
from otel_ort.profiling.twin import TwinUnavailable, twin_config
from otel_ort.sampling import Ratio
from tests.conftest import CUDA, Telemetry, attrs, cuda_missing, instrumentation, run_threads
from tests.models import typed_cases
from tests.perf_models import matmul_chain
from tests.profiled_runs import check_case, difference

X = {"x": np.random.default_rng(3).standard_normal((512, 512)).astype(np.float32)}


pytestmark = pytest.mark.skipif(cuda_missing() is not None, reason=str(cuda_missing()))


def test_a_c_api_cuda_session_returns_ort_outputs_in_host_memory(
    instrumented: Telemetry, tmp_path: Path
) -> None:
    model = matmul_chain(nodes=8, size=512)
    session = ort.InferenceSession(model, providers=CUDA)
    want = session.run(None, X)
    with CSession(twin_config(session)) as twin:
        got = twin.run(X, profile_prefix=str(tmp_path / "run"))
    assert difference(want, got) is None
    (path,) = glob.glob(str(tmp_path / "run*.json"))
    nodes = read_profile(path).runs[0].nodes
    assert {node.provider for node in nodes} == {"CUDAExecutionProvider"}, nodes


def test_a_twin_made_before_any_ort_cuda_session_works_too(tmp_path: Path) -> None:
    """ORT's two library copies (Python's and the C API's) share the CUDA provider library;
    whichever copy loads it first, both copies' sessions run on it."""
    model = tmp_path / "chain.onnx"
    model.write_bytes(matmul_chain(nodes=4, size=256))
    script = f"""
import numpy as np, onnxruntime as ort
from otel_ort.capi import CSession, SessionConfig
x = {{"x": np.ones((256, 256), np.float32)}}
providers = (("CUDAExecutionProvider", {{}}), ("CPUExecutionProvider", {{}}))
twin_first = CSession(SessionConfig({str(model)!r}, providers=providers)).run(x)
session = ort.InferenceSession({str(model)!r}, providers={CUDA!r})
assert session.get_providers()[0] == "CUDAExecutionProvider", session.get_providers()
assert session.run(None, x)[0].tobytes() == twin_first[0].tobytes()
print("same")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "same", done.stderr


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


def test_the_twin_gets_the_sessions_cuda_options(instrumented: Telemetry) -> None:
    options = {"device_id": "0", "arena_extend_strategy": "kSameAsRequested"}
    session = ort.InferenceSession(
        matmul_chain(nodes=1, size=8),
        providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"],
    )
    config = twin_config(session)
    name, given = config.providers[0]
    assert name == "CUDAExecutionProvider" and options.items() <= given.items()
    CSession(config).close()  # ORT accepts every option it reported
    wrong = dict(given, device_id="64")
    with pytest.raises(OrtError, match="device_id"):
        CSession(type(config)(config.model, providers=((name, wrong),)))


def cuda_stream() -> int:
    """A new CUDA stream, from the CUDA runtime that ORT's CUDA provider loaded."""
    with open("/proc/self/maps") as maps:
        runtime = next(line.split()[-1] for line in maps if "/libcudart.so" in line)
    stream = ctypes.c_void_p()
    assert ctypes.CDLL(runtime).cudaStreamCreate(ctypes.byref(stream)) == 0
    return int(stream.value or 0)


def test_the_twin_runs_on_a_stream_of_its_own(telemetry: Telemetry, tmp_path: Path) -> None:
    """The user's stream may be destroyed while the twin lives: the twin does not take it."""
    model = matmul_chain(nodes=4, size=256)
    ort.InferenceSession(model, providers=CUDA)  # loads the CUDA runtime
    options = {"user_compute_stream": str(cuda_stream())}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(
            model, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"]
        )
        reported = session.get_provider_options()["CUDAExecutionProvider"]
        assert reported["user_compute_stream"] == options["user_compute_stream"]
        assert "user_compute_stream" not in twin_config(session).providers[0][1]
        feeds = {"x": np.ones((256, 256), np.float32)}
        want = session.run(None, feeds)
        for _ in range(2):  # the first builds the twin
            with profile_next_run():
                got = session.run(None, feeds)
            assert flush_profiles(timeout=60)
    assert attrs(telemetry.spans(semconv.SPAN_RUN)[-1])[semconv.RUN_PROFILED]
    assert difference(want, got) is None


def test_a_session_replaying_cuda_graphs_has_no_twin(instrumented: Telemetry) -> None:
    session = ort.InferenceSession(
        matmul_chain(nodes=1, size=8),
        providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})],
    )
    with pytest.raises(TwinUnavailable, match="CUDA graphs"):
        twin_config(session)


def test_threads_on_one_cuda_session_each_profiled_run_has_its_file(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    session_model = matmul_chain(nodes=8, size=256)
    feeds = {"x": np.ones((256, 256), np.float32)}
    failed: list[BaseException] = []
    failures_before = failure_counts()
    with instrumentation(
        **telemetry.providers,
        profile_dir=str(tmp_path),
        profile_sampler=Ratio(0.2),
        profile_max_files=10_000,
    ):
        session = ort.InferenceSession(session_model, providers=CUDA)
        want = session.run(None, feeds)[0].tobytes()
        deadline = time.monotonic() + 5

        def hammer() -> None:
            try:
                while time.monotonic() < deadline:
                    assert session.run(None, feeds)[0].tobytes() == want
            except BaseException as exc:
                failed.append(exc)

        run_threads([threading.Thread(target=hammer) for _ in range(4)])
        assert flush_profiles(timeout=60)
    assert not failed, failed[:3]
    assert failure_counts() == failures_before
    runs = [attrs(s) for s in telemetry.spans(semconv.SPAN_RUN)]
    files = [run[semconv.PROFILE_FILE] for run in runs if run.get(semconv.RUN_PROFILED)]
    assert len(files) > 5 and len(set(files)) == len(files)
    assert all(Path(f).exists() for f in files)

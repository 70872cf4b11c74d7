"""Every ONNX backend node test case (the `onnx` package's conformance suite, ~1,900 one-op
models with their inputs) that ORT's CPU provider runs: a profiled run returns what ORT's own
run returns, bitwise, in the same Python types. A selected run ORT fails raises ORT's own
exception (its inputs never reach a ready twin: priming one with them fails alike; a twin
failing a run is tested in test_profiling).

Slow stage (about 30 s): the cases are generated, and each gets a session and a twin. Run on
CPU, and on CUDA where onnxruntime-gpu finds a GPU (80 s on an H100; skipped elsewhere: see
test_cuda).
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.failures import failure_counts
from tests.conftest import CUDA, Telemetry, attrs, cuda_missing, instrumentation

pytestmark = pytest.mark.e2e

CPU = ["CPUExecutionProvider"]
FEWEST_PROFILED = 1200
"""onnx 1.23.2's cases ORT 1.31.1 runs and otel-ort profiles (1334): a floor, so that an
upgrade that silently stops running the cases fails the test."""


def difference(want: Any, got: Any, where: str = "outputs") -> str | None:
    """Where ``got`` differs from ``want`` in Python type, dtype, shape, strides or bytes."""
    if type(want) is not type(got):
        return f"{where}: {type(got).__name__}, ORT returns {type(want).__name__}"
    if isinstance(want, np.ndarray):
        if (want.dtype, want.shape) != (got.dtype, got.shape):
            return f"{where}: {got.dtype}{got.shape}, ORT returns {want.dtype}{want.shape}"
        if want.dtype == object:
            items = [(type(v), v) for v in want.ravel()], [(type(v), v) for v in got.ravel()]
            return None if items[0] == items[1] else f"{where}: objects differ"
        if want.size > 1 and want.strides != got.strides:
            return f"{where}: strides {got.strides}, ORT's {want.strides}"
        return None if want.tobytes() == got.tobytes() else f"{where}: bytes differ"
    if isinstance(want, list | dict):
        if len(want) != len(got) or (isinstance(want, dict) and list(want) != list(got)):
            return f"{where}: {len(got)} items or keys differ from ORT's {len(want)}"
        keys = list(want) if isinstance(want, dict) else range(len(want))
        found = (difference(want[k], got[k], f"{where}[{k!r}]") for k in keys)
        return next((d for d in found if d), None)
    return None if want == got else f"{where}: {got!r}, ORT returns {want!r}"


def node_cases() -> list[Any]:
    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        from onnx.backend.test.case import node

        return node.collect_testcases(None)


def feeds_of(case: Any, inputs: list[Any], session: ort.InferenceSession) -> dict[str, Any]:
    names = {i.name for i in session.get_inputs()}
    declared = [i.name for i in case.model.graph.input]
    return {name: value for name, value in zip(declared, inputs, strict=False) if name in names}


@pytest.mark.parametrize(
    "providers",
    [
        CPU,
        pytest.param(
            CUDA, marks=pytest.mark.skipif(cuda_missing() is not None, reason=str(cuda_missing()))
        ),
    ],
    ids=["cpu", "cuda"],
)
def test_profiled_runs_match_ort_on_every_onnx_node_test_case(
    telemetry: Telemetry, tmp_path: Path, providers: list[str]
) -> None:
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    failures_before = failure_counts()
    with instrumentation(
        **telemetry.providers, profile_dir=str(tmp_path), profile_max_files=10, perf_events=False
    ):
        for case in node_cases():
            try:
                session = ort.InferenceSession(case.model.SerializeToString(), providers=providers)
            except Exception:
                outcomes["ORT cannot load"] += 1
                continue
            for number, (inputs, _) in enumerate(case.data_sets):
                name = f"{case.name}[{number}]"
                outcome = check_case(telemetry, session, feeds_of(case, inputs, session))
                outcomes[outcome.split(":")[0]] += 1
                if outcome.startswith(("differs", "raises", "not profiled")):
                    problems.append(f"{name}: {outcome}")
            telemetry.exporter.clear()
    assert failure_counts() == failures_before, "otel-ort reported failures of its own"
    # not profiled, and said why: list inputs (sequences, optionals), not converted for the
    # twin; random operators, whose numbers a twin would draw apart
    said = ("is a list, not a numpy array", "the model has random operators")
    assert not [p for p in problems if not any(s in p for s in said)], "\n".join(problems)
    assert outcomes["profiled"] >= FEWEST_PROFILED, outcomes
    assert outcomes["ORT raises"] > 100, outcomes


def check_case(telemetry: Telemetry, session: ort.InferenceSession, feeds: dict[str, Any]) -> str:
    """Run ``feeds`` plain and profiled; what happened, and how it differs from ORT's run."""
    try:
        want = session.run(None, feeds)
    except Exception as ort_error:
        with profile_next_run():
            try:
                session.run(None, feeds)
            except Exception as error:
                same = type(error) is type(ort_error) and str(error) == str(ort_error)
                return "ORT raises" if same else f"raises {error!r}, ORT {ort_error!r}"
        return f"differs: a profiled run returned where ORT raised {ort_error!r}"
    with profile_next_run():  # the first builds the session's twin (and runs on ORT)
        session.run(None, feeds)
    assert flush_profiles(timeout=60)
    with profile_next_run():
        got = session.run(None, feeds)
    assert flush_profiles(timeout=60)
    run = attrs(telemetry.spans(semconv.SPAN_RUN)[-1])
    if not run[semconv.RUN_PROFILED]:
        return f"not profiled: {run.get(semconv.PROFILE_SKIP_DETAIL)}"
    found = difference(want, got)
    return f"differs: {found}" if found else "profiled"

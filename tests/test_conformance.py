"""Every ONNX backend node test case (the `onnx` package's conformance suite, ~1,900 one-op
models with their inputs) that ORT's CPU provider runs: a profiled run returns what ORT's own
run returns, bitwise, in the same Python types (sequences and optionals too). A selected run
ORT fails raises ORT's own exception.

Slow stage (about 10 s): the cases are generated, and each gets a session. Run on CPU, and
on CUDA where onnxruntime-gpu finds a GPU (skipped elsewhere: see test_cuda).
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest

from otel_ort import OrtInstrumentor, semconv
from otel_ort.failures import failure_counts
from tests.conftest import CUDA, Telemetry, cuda_missing, instrumentation
from tests.helpers.profiled_runs import check_case

pytestmark = pytest.mark.e2e

CPU = ["CPUExecutionProvider"]
FEWEST_PROFILED = 1200
"""onnx 1.23.2's cases ORT 1.31.1 runs and otel-ort profiles (1352): a floor, so that an
upgrade that silently stops running the cases fails the test."""


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
    tmp_path: Path, providers: list[str]
) -> None:
    """Profiles converted as in production (``configure()``'s processor: in the conversion
    process); no run says its profile had a problem."""
    telemetry = Telemetry(encoded=True)
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    failures_before = failure_counts()
    with instrumentation(
        **telemetry.providers, profile_dir=str(tmp_path), profile_max_files=10, perf_events=False
    ):
        process = OrtInstrumentor()._profiler._converter.process
        assert process is not None and process.start(), "the conversion process did not start"
        for case in node_cases():
            try:
                session = ort.InferenceSession(case.model.SerializeToString(), providers=providers)
            except Exception:
                outcomes["ORT cannot load"] += 1
                continue
            for number, (inputs, _) in enumerate(case.data_sets):
                name = f"{case.name}[{number}]"
                outcome = check_case(telemetry, session, feeds_of(case, inputs, session))
                run = telemetry.spans(semconv.SPAN_RUN)[-1]
                error = (run.attributes or {}).get(semconv.PROFILE_ERROR)
                if error is not None:
                    problems.append(f"{name}: {error!r}")
                outcomes[outcome.split(":")[0]] += 1
                if outcome.startswith(("differs", "raises", "not profiled")):
                    problems.append(f"{name}: {outcome}")
            telemetry.exporter.clear()
        assert process.conversions >= FEWEST_PROFILED, "not converted in the process"
    assert failure_counts() == failures_before, "otel-ort reported failures of its own"
    assert telemetry.encoded.spans >= FEWEST_PROFILED, "node spans never reached the exporter"
    assert not problems, "\n".join(problems)
    assert outcomes["profiled"] >= FEWEST_PROFILED, outcomes
    assert outcomes["ORT raises"] > 100, outcomes

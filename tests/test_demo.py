"""The README's main job: `otel-ort demo` prints a span tree and writes a valid spans file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from otel_ort import semconv
from tests.conftest import file_spans

pytestmark = pytest.mark.e2e


def test_demo_prints_span_tree_and_writes_otlp_json(tmp_path: Path) -> None:
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("otel-ort")), "demo", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "├─ onnxruntime.session.create" in out
    assert "│  └─ onnxruntime.run" in out
    assert "error=InvalidArgument status=ERROR" in out
    assert "| mlp.onnx | CPUExecutionProvider | InvalidArgument |    1 |" in out

    spans = file_spans(tmp_path / "spans.otlp.jsonl")
    runs = [s for s in spans if s["name"] == semconv.SPAN_RUN]
    requests = {s["spanId"]: s for s in spans if s["name"] == "demo.request"}
    assert len(runs) == 21 and len(requests) == 20
    ok_runs = [s for s in runs if s["parentSpanId"] in requests]
    assert len(ok_runs) == 20
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
    assert {s["traceId"] for s in spans} == {runs[0]["traceId"]}


def test_demo_rejects_bad_arguments() -> None:
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("otel-ort")), "demo", "--requests", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 2
    assert "--requests must be at least 1" in completed.stderr

"""`opentelemetry-instrument python script.py` on a plain ORT script, exporting over OTLP/gRPC."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ort import semconv
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.e2e

SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
for _ in range(3):
    session.run(None, {"x": np.ones((1, 32), np.float32)})
print("ran")
"""


def run_instrumented(script: Path, model: Path, endpoint: str, **env: str) -> str:
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    environment = {
        **os.environ,
        "OTEL_SERVICE_NAME": "zero-code",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        **env,
    }
    completed = subprocess.run(
        [str(instrument), sys.executable, str(script), str(model)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_opentelemetry_instrument_traces_a_plain_ort_script(tmp_path: Path, mlp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    with OtlpReceiver() as receiver:
        assert run_instrumented(script, mlp_path, receiver.grpc_endpoint).strip() == "ran"
        received = receiver.wait_for_spans(4)
    names = sorted(span.name for _, span in received)
    assert names == [semconv.SPAN_RUN] * 3 + [semconv.SPAN_SESSION_CREATE]
    resource = received[0][0]
    service = {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"]
    assert service == "zero-code"


def test_disabled_instrumentations_env_switches_it_off(tmp_path: Path, mlp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    with OtlpReceiver() as receiver:
        run_instrumented(
            script,
            mlp_path,
            receiver.grpc_endpoint,
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="onnxruntime",
        )
        assert receiver.wait_for_spans(1, timeout=2) == []

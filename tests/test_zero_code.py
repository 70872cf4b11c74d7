"""`opentelemetry-instrument python examples/zero_code/app.py`: a plain ORT script with no
OpenTelemetry code, traced (and profiled, from the environment alone) over OTLP/gRPC, as
``examples/zero_code/README.md`` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ort import semconv
from tests.helpers.example_spans import attributes_of
from tests.helpers.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.e2e

APP = Path(__file__).resolve().parents[1] / "examples" / "zero_code" / "app.py"


def run_instrumented(model: Path, endpoint: str, *app_args: str, **env: str) -> str:
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
        "OTEL_SERVICE_NAME": "zero-code",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        **env,
    }
    # the command line of examples/zero_code/README.md
    command = [str(instrument), "--traces_exporter", "otlp", "--metrics_exporter", "otlp"]
    completed = subprocess.run(
        [*command, sys.executable, str(APP), str(model), *app_args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_opentelemetry_instrument_traces_a_plain_ort_script(mlp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        stdout = run_instrumented(
            mlp_path,
            receiver.grpc_endpoint,
            "--runs=3",
            "--interval=0",
        )
        assert stdout.strip() == "ran 3 runs: y float32[1, 32]"
        received = receiver.wait_for_spans(4)
        metric_names = receiver.metric_names()
    names = sorted(span.name for _, span in received)
    assert names == [semconv.SPAN_RUN] * 3 + [semconv.SPAN_SESSION_CREATE]
    resource = received[0][0]
    service = {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"]
    assert service == "zero-code"
    assert semconv.METRIC_RUN_DURATION in metric_names


def test_a_bad_otel_ort_variable_is_logged_and_runs_are_still_traced(mlp_path: Path) -> None:
    """An error from ``instrument()`` would make ``opentelemetry-instrument`` give up on
    every instrumentation, the application's web framework included."""
    with OtlpReceiver() as receiver:
        run_instrumented(
            mlp_path,
            receiver.grpc_endpoint,
            "--runs=2",
            "--interval=0",
            OTEL_ORT_PROFILE_SAMPLER="bogus",
        )
        received = receiver.wait_for_spans(3)
    names = sorted(span.name for _, span in received)
    assert names == [semconv.SPAN_RUN] * 2 + [semconv.SPAN_SESSION_CREATE]


def test_disabled_instrumentations_env_switches_it_off(mlp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run_instrumented(
            mlp_path,
            receiver.grpc_endpoint,
            "--runs=3",
            "--interval=0",
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="onnxruntime",
        )
        assert receiver.wait_for_spans(1, timeout=2) == []


def test_profile_sampler_env_profiles_with_no_code(tmp_path: Path, mlp_path: Path) -> None:
    """``OTEL_ORT_PROFILE_SAMPLER=every:10``: runs 10, 20 and 30 are selected, and each is
    profiled, the session's first selected run too (no warm-up)."""
    profiles = tmp_path / "profiles"
    with OtlpReceiver() as receiver:
        run_instrumented(
            mlp_path,
            receiver.grpc_endpoint,
            "--runs=30",
            "--interval=0",
            OTEL_ORT_PROFILE_SAMPLER="every:10",
            OTEL_ORT_PROFILE_DIR=str(profiles),
        )
        spans = [span for _, span in receiver.spans()]
    runs = sorted(
        (s for s in spans if s.name == semconv.SPAN_RUN), key=lambda s: s.start_time_unix_nano
    )
    assert len(runs) == 30
    outcomes = {}
    for number, run in enumerate(runs, 1):
        attributes = attributes_of(run)
        if attributes[semconv.RUN_PROFILED]:
            outcomes[number] = "profiled"
        elif semconv.PROFILE_SKIP_REASON in attributes:
            outcomes[number] = attributes[semconv.PROFILE_SKIP_REASON]
    assert outcomes == {10: "profiled", 20: "profiled", 30: "profiled"}
    for number in outcomes:  # node spans under each profiled run, its Chrome JSON on disk
        run = runs[number - 1]
        nodes = [s for s in spans if s.parent_span_id == run.span_id]
        assert len(nodes) == attributes_of(run)[semconv.RUN_NODE_COUNT] > 0
        assert all(semconv.NODE_OP_TYPE in attributes_of(node) for node in nodes)
        assert Path(attributes_of(run)[semconv.PROFILE_FILE]).parent == profiles
    assert len(list(profiles.glob("otel-ort_*.json.gz"))) == 3

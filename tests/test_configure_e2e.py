"""``otel_ort.configure()`` as a user's process has it: global, from the environment, and with
the collector gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_ort import semconv
from tests.helpers.otlp_receiver import OtlpReceiver, free_port

pytestmark = pytest.mark.e2e

FROM_ENVIRONMENT = """
import numpy as np, onnxruntime as ort, otel_ort
from otel_ort.demo_model import mlp_model

otel_ort.configure()  # everything from OTEL_* variables
otel_ort.OrtInstrumentor().instrument()
ort.InferenceSession(mlp_model(32, 2)).run(None, {"x": np.ones((1, 32), np.float32)})
try:
    otel_ort.configure()
except RuntimeError as exc:
    print(exc)
"""


def python(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_configure_reads_the_standard_environment_variables() -> None:
    with OtlpReceiver() as receiver:
        completed = python(
            "-c",
            FROM_ENVIRONMENT,
            OTEL_SERVICE_NAME="from-env",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=test",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_HEADERS="x-key=from-env",
        )
        assert completed.returncode == 0, completed.stderr
        received = receiver.wait_for_spans(2)
        names = receiver.metric_names()
        headers = receiver.headers
    assert "already set" in completed.stdout  # a second configure() is refused, clearly
    assert sorted(span.name for _, span in received) == [
        semconv.SPAN_RUN,
        semconv.SPAN_SESSION_CREATE,
    ]
    resource = {kv.key: kv.value.string_value for kv in received[0][0].attributes}
    assert resource["service.name"] == "from-env"
    assert resource["deployment.environment.name"] == "test"
    assert semconv.METRIC_RUN_DURATION in names  # flushed at exit
    assert all(h.get("x-key") == "from-env" for h in headers)


def test_10000_runs_with_the_collector_gone(tmp_path: Path) -> None:
    """Inference is unaffected, memory stays bounded, every drop is counted and logged."""
    completed = python(
        "-m", "tests.helpers.dead_collector", str(free_port()), str(tmp_path / "profiles")
    )
    exited = time.time()
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    result = json.loads(completed.stdout.splitlines()[-1])
    rss = {int(runs): mib for runs, mib in result["rss_mib"].items()}
    print(f"\n{'runs':>6} | RSS MiB\n" + "\n".join(f"{n:>6} | {m:7.1f}" for n, m in rss.items()))
    exit_s = exited - result["printed_at"]
    print(f"{result['seconds']} s for {result['runs']} runs, then {exit_s:.1f} s to exit")
    print(f"dropped: {result['dropped']}")
    assert result["runs"] == 10_000
    assert rss[10_000] - rss[2_500] < 24, "memory grows with the number of runs"
    dropped = result["dropped"]
    assert dropped.get("requests.export_failed", 0) + dropped.get("requests.queue_full", 0) > 0
    assert dropped.get("profiles.export_failed", 0) > 0
    # logged: the first drop at once, the rest with the running total at exit
    logged = [line for line in completed.stderr.splitlines() if "spans dropped" in line]
    assert len(logged) >= 2 and semconv.METRIC_SPANS_DROPPED in logged[-1]
    in_all = int(logged[-1].split("(")[-1].split(" in all")[0])
    assert in_all >= sum(dropped.values())
    assert len(list((tmp_path / "profiles").glob("*.json.gz"))) >= 150  # profiles still kept
    assert exit_s < 5

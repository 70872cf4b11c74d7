"""The examples in ``examples/``, each run as a user would run it, exporting over real OTLP to
an in-process receiver. ``configure()`` sets global providers, so each runs in a subprocess.

(The zero-code example is run by ``tests/test_zero_code.py``.)"""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import semconv
from otel_ort.demo_model import mlp_model
from tests.helpers.example_spans import (
    attributes_of,
    by_parent,
    check_profiled,
    clean_environment,
    node_events,
)
from tests.helpers.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SPAN_KIND_SERVER = 2
STATUS_CODE_ERROR = 2


def run_python(
    args: list[str], env: dict[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``python *args`` with ``env`` on top of a copy of this environment without any OTEL_*
    or otel-ort settings of the developer's own."""
    return subprocess.run(
        [sys.executable, *args],
        env=clean_environment(**env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- examples/fastapi_service ---------------------------------------------------------------

UPSTREAM_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
UPSTREAM_SPAN = "00f067aa0ba902b7"

DRIVER = f"""
import json
import numpy as np
from fastapi.testclient import TestClient

from examples.fastapi_service.app import app

rows = np.random.default_rng(7).standard_normal((3, 256)).astype(np.float32).tolist()
requests = [
    ("plain", "/predict", {{}}),
    ("header", "/predict", {{"X-Profile": "1"}}),
    ("query", "/predict?profile=1", {{}}),
    ("upstream", "/predict", {{
        "traceparent": "00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-01",
        "baggage": "onnxruntime.profile=1",
    }}),
]
results = {{}}
with TestClient(app) as client:  # runs the app's lifespan: the model load
    for name, url, headers in requests:
        response = client.post(url, json={{"inputs": rows}}, headers=headers)
        results[name] = [response.status_code, response.json()]
    bad = client.post("/predict", json={{"inputs": [[1.0, 2.0]]}})
    results["bad"] = [bad.status_code, bad.json()]
print(json.dumps({{"rows": rows, "results": results}}))
# no flush: leaving TestClient runs the app's lifespan shutdown, which exports everything
"""


def test_fastapi_service_traces_requests_and_profiles_on_demand(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"  # missing: otel-ort creates it 0700
    with OtlpReceiver() as receiver:
        completed = run_python(
            ["-c", DRIVER],
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint,
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_ORT_PROFILE_SAMPLER": "never",  # on demand only: the test knows which
                "OTEL_ORT_PROFILE_DIR": str(profiles),
                "XDG_CACHE_HOME": str(tmp_path / "cache"),  # where the demo model is built
            },
        )
        assert completed.returncode == 0, completed.stderr
        received = receiver.spans()
        metric_names = receiver.metric_names()
    output = json.loads(completed.stdout.splitlines()[-1])
    results = output["results"]

    # the HTTP answers: the model's outputs, as ORT computes them directly
    cached = tmp_path / "cache" / "otel-ort" / "models" / "mlp_256x4.onnx"
    assert cached.read_bytes() == mlp_model(width=256, depth=4)
    session = ort.InferenceSession(cached, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.asarray(output["rows"], np.float32)})[0]
    for name in ("plain", "header", "query", "upstream"):
        status, body = results[name]
        assert status == 200, (name, body)
        np.testing.assert_allclose(np.asarray(body["outputs"]), expected, rtol=1e-6, atol=1e-6)
    assert results["bad"][0] == 422
    assert "invalid dimensions" in results["bad"][1]["detail"]

    resources = {kv.key: kv.value.string_value for kv in received[0][0].attributes}
    assert resources["service.name"] == "ort-service"
    spans = [span for _, span in received]
    children = by_parent(spans)
    servers = sorted(
        (s for s in spans if s.kind == SPAN_KIND_SERVER), key=lambda s: s.start_time_unix_nano
    )
    assert [s.name for s in servers] == ["POST /predict"] * 5
    runs = []
    for server in servers:  # FastAPI's server span parents the request's run span directly
        (run,) = [s for s in children[server.span_id] if s.name == semconv.SPAN_RUN]
        assert run.trace_id == server.trace_id
        runs.append(run)
    plain, header, query, upstream, bad = runs
    assert attributes_of(plain)[semconv.RUN_PROFILED] is False
    assert plain.span_id not in children
    for profiled in (header, query, upstream):
        check_profiled(profiled, children, profiles)
    assert bad.status.code == STATUS_CODE_ERROR
    assert attributes_of(bad)[semconv.ERROR_TYPE] == "InvalidArgument"
    # the upstream caller's trace and baggage travelled in its headers
    assert servers[3].trace_id.hex() == UPSTREAM_TRACE
    assert servers[3].parent_span_id.hex() == UPSTREAM_SPAN
    assert stat.S_IMODE(profiles.stat().st_mode) == 0o700
    assert len(list(profiles.glob("otel-ort_*.json.gz"))) == 3

    # start-up: the model load, and no run (the first request asking for a profile gets one)
    (startup,) = [s for s in spans if s.name == "startup"]
    assert [s.name for s in children[startup.span_id]] == [semconv.SPAN_SESSION_CREATE]
    assert semconv.METRIC_RUN_DURATION in metric_names


SPINNING_DRIVER = """
from fastapi.testclient import TestClient

from examples.fastapi_service.app import app, model

with TestClient(app):  # the lifespan opens the session
    options = model.session.get_session_options()
    try:
        print(options.get_session_config_entry("session.intra_op.allow_spinning"))
    except RuntimeError:  # not set: ORT's default, threads spin
        print("ORT's default")
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [(None, "0"), ("", "0"), ("0", "0"), ("1", "ORT's default"), ("true", None)],
)
def test_fastapi_service_keeps_orts_threads_from_spinning_unless_asked(
    tmp_path: Path, setting: str | None, expected: str | None
) -> None:
    """The session's intra-op threads do not spin; ``ORT_SERVICE_SPINNING=1`` leaves ORT's
    default (bench.service_load --spinning relies on it); any other value stops the service
    at its start, saying what to set."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "OTEL_ORT_PROFILE_SAMPLER": "never"}
    if setting is not None:
        env["ORT_SERVICE_SPINNING"] = setting
    with OtlpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.grpc_endpoint
        env["OTEL_EXPORTER_OTLP_INSECURE"] = "true"
        completed = run_python(["-c", SPINNING_DRIVER], env)
    if expected is None:
        assert completed.returncode == 1 and not completed.stdout
        assert "ORT_SERVICE_SPINNING='true': set 0" in completed.stderr
        return
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == expected


# -- examples/batch_profile.py --------------------------------------------------------------

BATCH = str(ROOT / "examples" / "batch_profile.py")


def table(stdout: str) -> dict[str, int]:
    """The summary table: label -> count."""
    rows = re.findall(r"^([a-z][a-z ]+?)\s{2,}(\d+)\s", stdout, re.MULTILINE)
    return {label: int(count) for label, count in rows}


def test_batch_profile_exports_the_job_as_one_trace(tmp_path: Path, mlp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    with OtlpReceiver() as receiver:
        completed = run_python(
            [
                BATCH,
                str(mlp_path),
                "--batches",
                "30",
                "--every",
                "10",
                "--batch-size",
                "4",
                "--profile-dir",
                str(profiles),
            ],
            {
                "OTEL_SERVICE_NAME": "batch-test",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
        )
        assert completed.returncode == 0, completed.stderr
        received = receiver.spans()
    assert table(completed.stdout) == {
        "runs": 30,
        "selected for profiling": 3,
        "profiled runs": 3,
        "profile files": 3,
    }
    assert "run 30/30" in completed.stderr  # progress
    files = sorted(profiles.glob("otel-ort_*.json.gz"))
    assert len(files) == 3
    assert all(str(path) in completed.stdout for path in files[:3])
    assert stat.S_IMODE(profiles.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)

    spans = [span for _, span in received]
    (job,) = [s for s in spans if s.name == "batch-profile"]
    assert f"trace {job.trace_id.hex()} sent to {receiver.http_endpoint}" in completed.stdout
    assert all(span.trace_id == job.trace_id for span in spans)  # the job is one trace
    resources = {kv.key: kv.value.string_value for kv in received[0][0].attributes}
    assert resources["service.name"] == "batch-test"
    children = by_parent(spans)
    runs = sorted(
        (s for s in children[job.span_id] if s.name == semconv.SPAN_RUN),
        key=lambda s: s.start_time_unix_nano,
    )
    assert len(runs) == 30
    profiled = [
        index for index, run in enumerate(runs, 1) if attributes_of(run)[semconv.RUN_PROFILED]
    ]
    assert profiled == [10, 20, 30]  # the first selected run too
    assert not [run for run in runs if semconv.PROFILE_SKIP_REASON in attributes_of(run)]
    for index in profiled:
        check_profiled(runs[index - 1], children, profiles)


def test_batch_profile_stopped_by_sigterm_exports_every_run_made(
    tmp_path: Path, mlp_path: Path
) -> None:
    """SIGTERM mid-job: the job span, every run span made and every profiled run's node spans
    arrive (Python's default for SIGTERM would end the process with nothing exported)."""
    profiles = tmp_path / "profiles"
    with OtlpReceiver() as receiver:
        job = subprocess.Popen(
            [
                sys.executable,
                BATCH,
                str(mlp_path),
                "--batches",
                "10000000",
                "--every",
                "10",
                "--batch-size",
                "4",
                "--profile-dir",
                str(profiles),
            ],
            env=clean_environment(
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                OTEL_BSP_SCHEDULE_DELAY="600000",  # spans wait in their queues for the signal
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while len(list(profiles.glob("otel-ort_*.json.gz"))) < 5:  # some runs profiled
                assert job.poll() is None and time.monotonic() < deadline, job.communicate()
                time.sleep(0.02)
            job.send_signal(signal.SIGTERM)
            stdout, stderr = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
                job.communicate()
        received = receiver.spans()
    assert job.returncode == 128 + signal.SIGTERM, stderr
    assert "profiled runs" not in stdout  # stopped before its summary

    spans = [span for _, span in received]
    (root,) = [s for s in spans if s.name == "batch-profile"]
    assert all(span.trace_id == root.trace_id for span in spans)
    children = by_parent(spans)
    runs = sorted(
        (s for s in children[root.span_id] if s.name == semconv.SPAN_RUN),
        key=lambda s: s.start_time_unix_nano,
    )
    if runs[-1].status.code == STATUS_CODE_ERROR:  # the run the signal's SystemExit ended
        assert runs[-1].status.message == "SystemExit: 143"
        assert attributes_of(runs[-1])[semconv.ERROR_TYPE] == "SystemExit"
        runs.pop()
    profiled = [
        index for index, run in enumerate(runs, 1) if attributes_of(run)[semconv.RUN_PROFILED]
    ]
    assert profiled == list(range(10, len(runs) + 1, 10))  # no run span lost
    assert len(profiled) >= 5
    for index in profiled:
        run = runs[index - 1]
        check_profiled(run, children, profiles)
        assert len(children[run.span_id]) == node_events(
            Path(attributes_of(run)[semconv.PROFILE_FILE])
        )
    assert len(list(profiles.glob("otel-ort_*.json.gz"))) == len(profiled)


def test_batch_profile_without_an_endpoint_keeps_profile_files(tmp_path: Path) -> None:
    completed = run_python(
        [BATCH, "--batches", "20", "--every", "5", "--batch-size", "2"], {}, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    assert table(completed.stdout)["profiled runs"] == 4  # the demo model, every 5th of 20
    assert "sent to" not in completed.stdout  # nothing configured, nothing exported
    directory = tmp_path / "otel-ort-profiles"  # the default, under the current directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert len(list(directory.glob("otel-ort_*.json.gz"))) == 4


def test_batch_profile_refuses_a_profile_dir_open_to_others(tmp_path: Path) -> None:
    profiles = tmp_path / "shared"
    profiles.mkdir(mode=0o755)
    profiles.chmod(0o755)
    completed = run_python([BATCH, "--batches", "2", "--profile-dir", str(profiles)], {})
    assert completed.returncode == 2
    assert "open to other users" in completed.stderr
    assert f"chmod 700 {profiles}" in completed.stderr

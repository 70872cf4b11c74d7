"""A profiled run's whole tree, sent by ``otel_ort.configure()`` to Arize Phoenix (a real OTLP
backend, started here) and read back over its REST API.

Stage ``make e2e-phoenix`` installs Phoenix into its own environment (``.venv-phoenix``) and
names its executable in ``OTEL_ORT_PHOENIX``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import configure, flush_profiles, semconv
from otel_ort.demo_model import mlp_model
from tests.conftest import instrumentation
from tests.helpers.kept_files import kept_document
from tests.helpers.otlp_receiver import free_port

pytestmark = pytest.mark.phoenix

DEPTH = 3  # nodes of the model: one fused MatMul+Add per layer
READY_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Phoenix:
    http: str  # REST API and OTLP/HTTP (/v1/traces)
    grpc: str  # OTLP/gRPC


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    executable = os.environ.get("OTEL_ORT_PHOENIX")
    if not executable:
        pytest.skip("needs Arize Phoenix: run `make e2e-phoenix` (it installs and names it)")
    workdir = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = free_port(), free_port()
    log = (workdir / "phoenix.log").open("w")
    server = subprocess.Popen(
        [executable, "serve"],
        env={
            **os.environ,
            "PHOENIX_WORKING_DIR": str(workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(http_port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (workdir / "phoenix.log").read_text()[-3000:]
                pytest.fail(f"Phoenix did not become ready at {url}:\n{tail}")
            time.sleep(0.5)
        yield Phoenix(http=url, grpc=f"http://127.0.0.1:{grpc_port}")
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def read_spans(phoenix: Phoenix, project: str, count: int) -> list[dict[str, Any]]:
    """The project's spans once ``count`` have arrived (Phoenix stores them asynchronously)."""
    deadline = time.monotonic() + 30
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            url = f"{phoenix.http}/v1/projects/{project}/spans?limit=1000"
            with urllib.request.urlopen(url, timeout=5) as response:
                spans = json.load(response)["data"]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # the project appears with its first span
                raise
        if len(spans) >= count:
            return spans
        time.sleep(0.5)
    return spans


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_profiled_run_tree_reads_back_intact(
    protocol: str, phoenix: Phoenix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = f"otel-ort-{protocol.replace('/', '-')}"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    endpoint = phoenix.grpc if protocol == "grpc" else phoenix.http
    telemetry = configure(
        service_name="phoenix-e2e",
        endpoint=endpoint,
        protocol=protocol,
        metrics_export=False,  # Phoenix takes traces only
        set_global=False,
    )
    tracer = telemetry.tracer_provider.get_tracer("test")
    feeds = {"x": np.ones((2, 32), np.float32)}
    with instrumentation(
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        profile_sampler="always",
        profile_dir=tmp_path / "profiles",
    ):
        session = ort.InferenceSession(mlp_model(32, DEPTH), providers=["CPUExecutionProvider"])
        with tracer.start_as_current_span("request") as request:
            session.run(None, feeds)
        assert flush_profiles(timeout=30)
    telemetry.shutdown()
    assert telemetry.dropped() == {}

    # session.create + request + the profiled run + its nodes
    spans = read_spans(phoenix, project, 3 + DEPTH)
    assert len(spans) == 3 + DEPTH
    by_id = {span["context"]["span_id"]: span for span in spans}
    context = request.get_span_context()
    trace_id, request_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    (run,) = [s for s in spans if s["attributes"].get(semconv.RUN_PROFILED) is True]
    nodes = [s for s in spans if s["parent_id"] == run["context"]["span_id"]]

    assert run["name"] == semconv.SPAN_RUN
    assert run["parent_id"] == request_id
    assert by_id[request_id]["name"] == "request"
    assert by_id[request_id]["parent_id"] is None
    assert {s["context"]["trace_id"] for s in [run, *nodes]} == {trace_id}
    assert len(nodes) == DEPTH
    for node in nodes:
        attributes = node["attributes"]
        assert attributes[semconv.NODE_OP_TYPE] == "FusedGemm"
        assert attributes[semconv.NODE_PROVIDER] == "CPUExecutionProvider"
        assert attributes[semconv.NODE_INPUT_SHAPES] == ["float[2,32]", "float[32]"]
        assert attributes[semconv.NODE_DURATION_US] >= 0
        if "perf.task-clock" in run["attributes"]:  # where perf can count (else said on the run)
            assert attributes["perf.task-clock"] >= 0  # per-node counts survive the trip
        assert run["start_time"] <= node["start_time"] <= node["end_time"] <= run["end_time"]

    run_attributes = run["attributes"]
    assert run_attributes[semconv.RUN_NODE_COUNT] == DEPTH
    assert run_attributes[semconv.MODEL_PATH].startswith("bytes:sha256:")
    profile = kept_document(str(run_attributes[semconv.PROFILE_FILE]))
    assert profile["otherData"]["trace_id"] == trace_id  # the kept Chrome JSON names the trace

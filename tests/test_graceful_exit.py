"""The FastAPI example under a real uvicorn, started and stopped as a user would: every span
made before a SIGTERM reaches the collector, and start-up does not wait on the collector.

uvicorn ends a process it shut down gracefully on SIGTERM by raising SIGTERM again with the
default handler: ``atexit`` handlers never run, so only the app's lifespan can export what is
left. These tests run ``python -m uvicorn examples.fastapi_service.app:app`` in a subprocess
against a real OTLP receiver in this process.
"""

from __future__ import annotations

import collections
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
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
from tests.helpers.otlp_receiver import OtlpReceiver, free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SPAN_KIND_SERVER = 2
UPSTREAM_SPAN = "00f067aa0ba902b7"
WIDTH, DEPTH = 64, 200
"""The served model: 200 layers, each fused by ORT into one node, so a profiled run has 200
node spans (1,600 in all, several batches' worth)."""
REQUESTS = 24
"""Every third one profiled (``X-Profile: 1``), the last one included."""
NEVER = "600000"
"""Milliseconds: batch and metric exports wait for a full batch or for shutdown."""


@dataclass
class Service:
    """``python -m uvicorn examples.fastapi_service.app:app`` on ``port``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    started: float
    """``time.monotonic()`` when the process was spawned."""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_listening(self, timeout: float = 120.0) -> None:
        """Until uvicorn accepts connections (it binds after the lifespan's start-up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"uvicorn exited:\n{self.output()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"uvicorn did not listen within {timeout} s:\n{self.output()}")


@contextmanager
def uvicorn_service(tmp_path: Path, **env: str) -> Iterator[Service]:
    """The example served by uvicorn, its own settings in ``env``; killed if still running."""
    port = free_port()
    log = tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "examples.fastapi_service.app:app"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=clean_environment(XDG_CACHE_HOME=str(tmp_path / "cache"), **env),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            yield Service(process, port, log, time.monotonic())
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def rows() -> list[list[float]]:
    values: list[list[float]] = (
        np.random.default_rng(7).standard_normal((2, WIDTH)).astype(np.float32).tolist()
    )
    return values


def test_sigterm_under_uvicorn_exports_every_span(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp_model(width=WIDTH, depth=DEPTH))
    profiles = tmp_path / "profiles"
    requests: dict[str, bool] = {}  # trace id -> profiled
    with (
        OtlpReceiver() as receiver,
        uvicorn_service(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.grpc_endpoint,
            OTEL_EXPORTER_OTLP_INSECURE="true",
            OTEL_BSP_SCHEDULE_DELAY=NEVER,  # spans wait in their queues for the signal
            OTEL_METRIC_EXPORT_INTERVAL=NEVER,
            OTEL_ORT_PROFILE_SAMPLER="never",  # on demand only: the test knows which
            OTEL_ORT_PROFILE_DIR=str(profiles),
            ORT_SERVICE_MODEL=str(model),
        ) as service,
    ):
        service.wait_until_listening()
        with httpx.Client(base_url=f"http://127.0.0.1:{service.port}", timeout=60) as client:
            for index in range(REQUESTS):
                trace_id = f"{index + 1:032x}"
                headers = {"traceparent": f"00-{trace_id}-{UPSTREAM_SPAN}-01"}
                if index % 3 == 2:
                    headers["X-Profile"] = "1"
                response = client.post("/predict", json={"inputs": rows()}, headers=headers)
                assert response.status_code == 200, response.text
                requests[trace_id] = "X-Profile" in headers
        before_signal = len(receiver.spans())
        service.process.send_signal(signal.SIGTERM)
        returncode = service.process.wait(timeout=120)
        received = receiver.spans()
        metric_names = receiver.metric_names()
    log = service.output()
    # uvicorn shut down gracefully, then died of the signal it re-raised: no atexit handler ran
    assert "Finished server process" in log, log
    assert returncode == -signal.SIGTERM, log

    spans = [span for _, span in received]
    traces: dict[str, list[Any]] = {}
    for span in spans:
        traces.setdefault(span.trace_id.hex(), []).append(span)
    received_names = collections.Counter(s.name for s in spans)
    assert len(traces) == len(requests) + 1, (received_names, before_signal, log)
    (startup,) = [s for s in spans if s.name == "startup"]
    assert set(traces) == {startup.trace_id.hex(), *requests}
    nodes = 0
    shapes = set()  # each request trace's span names, node spans left out
    for trace_id, profiled in requests.items():
        in_trace = traces[trace_id]
        children = by_parent(in_trace)
        (server,) = [s for s in in_trace if s.kind == SPAN_KIND_SERVER]
        assert server.name == "POST /predict"
        assert server.parent_span_id.hex() == UPSTREAM_SPAN
        (run,) = [s for s in children[server.span_id] if s.name == semconv.SPAN_RUN]
        if profiled:
            check_profiled(run, children, profiles)
            kept = Path(attributes_of(run)[semconv.PROFILE_FILE])
            assert len(children[run.span_id]) == node_events(kept) == DEPTH
            nodes += len(children[run.span_id])
        else:
            assert attributes_of(run)[semconv.RUN_PROFILED] is False
            assert run.span_id not in children
        names = collections.Counter(s.name for s in in_trace if s.parent_span_id != run.span_id)
        shapes.add(tuple(sorted(names.items())))
    assert len(shapes) == 1, shapes  # no request trace lost a span
    assert nodes == REQUESTS // 3 * DEPTH
    assert len(list(profiles.glob("otel-ort_*.json.gz"))) == REQUESTS // 3
    # the test's premise: spans were still queued, or profiles still converting, at the signal
    assert before_signal < len(spans), (before_signal, len(spans))
    assert semconv.METRIC_RUN_DURATION in metric_names  # the last metrics are exported too
    print(f"{len(spans)} spans ({nodes} node spans), {before_signal} exported before SIGTERM")


@contextmanager
def silent_collector() -> Iterator[str]:
    """A loopback port that accepts connections (the kernel's backlog) but never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@contextmanager
def refused_collector() -> Iterator[str]:
    """A loopback port nothing listens on: every connection is refused."""
    yield f"http://127.0.0.1:{free_port()}"


EXPORT_TIMEOUT_S = 60
"""Each export to the collectors below waits this long: a start-up that waited on one would
take at least this, far past ``READY_WITHIN_S``."""
READY_WITHIN_S = 30
"""A generous liveness bound on spawn-to-first-answer (measured: 3-4 s on a 2-vCPU VM)."""


@pytest.mark.parametrize("collector", [refused_collector, silent_collector])
def test_service_answers_at_once_with_the_collector_down(tmp_path: Path, collector: Any) -> None:
    with (
        collector() as endpoint,
        uvicorn_service(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_INSECURE="true",
            OTEL_EXPORTER_OTLP_TIMEOUT=str(EXPORT_TIMEOUT_S),
            OTEL_ORT_PROFILE_DIR=str(tmp_path / "profiles"),
        ) as service,
    ):
        service.wait_until_listening(timeout=EXPORT_TIMEOUT_S * 2)
        with httpx.Client(base_url=f"http://127.0.0.1:{service.port}", timeout=60) as client:
            inputs = [[0.5] * 256]
            response = client.post("/predict", json={"inputs": inputs}, headers={"X-Profile": "1"})
        answered = time.monotonic() - service.started
    assert response.status_code == 200, response.text
    assert np.asarray(response.json()["outputs"]).shape == (1, 256)
    print(f"first answer {answered:.2f} s after spawn, collector {collector.__name__}")
    assert answered < READY_WITHIN_S, service.output()

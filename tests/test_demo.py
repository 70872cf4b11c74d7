"""The README's main job: `otel-ort demo` prints a span tree and writes a valid spans file."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ort import semconv
from otel_ort.profiles.reader import read_profile
from tests.conftest import file_spans
from tests.helpers.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.e2e


def demo(*arguments: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """``otel-ort demo ARGUMENTS`` as a user types it."""
    command = [str(Path(sys.executable).with_name("otel-ort")), "demo", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def test_demo_prints_span_tree_and_writes_otlp_json(tmp_path: Path) -> None:
    completed = demo("--output-dir", str(tmp_path), timeout=300)
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    # 20 good requests and the bad one
    assert "Span tree (21 requests: 20 good, 1 failing on purpose):" in out
    assert "├─ onnxruntime.session.create" in out
    assert "│  └─ onnxruntime.run" in out
    assert "error=InvalidArgument status=ERROR" in out
    assert "| mlp.onnx | CPUExecutionProvider | false    | InvalidArgument |    1 |" in out
    # one profiled run, node by node, with its perf counters
    assert "One profiled run, a span per node, perf counters per node:" in out
    if "perf counters: none" not in out:  # else perf_event_open is refused here, and it says why
        assert "op=FusedGemm task-clock=" in out
        assert "perf counters: context-switches, page-faults, task-clock" in out
        # what task-clock sums (perf.threads: the calling thread and the pool's)
        legend = re.search(r"task-clock: CPU time summed over the (\d+) threads counted", out)
        assert legend, out
        assert "the calling thread and ORT's intra-op pool threads, which spin" in " ".join(
            out.split()
        )
    # the forced run and EveryNth(5)'s three of the good requests; its fourth is the bad one
    assert "| profiled   |    4 |" in out and "| run_failed |    1 |" in out
    chrome = Path(out.split("  last:   ")[1].split()[0])
    assert chrome.parent == tmp_path / "profiles" and chrome.exists()
    # the shown run's span against the report's run time: ORT's model_run, said with why
    shown = out.split("One profiled run, a span per node")[1]
    span = re.search(r"\nonnxruntime\.run +([\d.]+) ms", shown)
    assert span, shown
    span_ms = float(span[1])
    model_run = read_profile(chrome).runs[0].dur / 1e3
    time_legend = " ".join(shown.split("\ntime: ")[1].split("\n\n")[0].split())
    assert time_legend.startswith(
        f"the run's span, {span_ms:.3f} ms, is the whole profiled call; report.html shows "
        f"ORT's own run time, {model_run:.3f} ms (its model_run event: the graph's execution)."
    ), time_legend
    assert "otel-ort switching ORT's run profiling" in time_legend
    assert "ORT's profiler writing the run's JSON file" in time_legend
    report = tmp_path / "report.html"
    assert f"report:   {report}" in out and "<svg" in report.read_text()
    assert "otel-ort demo --otlp-endpoint http://localhost:4317" in out

    spans = file_spans(tmp_path / "spans.otlp.jsonl")
    runs = [s for s in spans if s["name"] == semconv.SPAN_RUN]
    requests = {s["spanId"]: s for s in spans if s["name"] == "demo.request"}
    assert len(runs) == 21 and len(requests) == 20
    ok_runs = [s for s in runs if s["parentSpanId"] in requests]
    assert len(ok_runs) == 20
    run_ids = {s["spanId"] for s in runs}
    nodes = [s for s in spans if s.get("parentSpanId") in run_ids]
    assert len(nodes) == 4 * 6  # four profiled runs of six (fused) nodes
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
    assert {s["traceId"] for s in spans} == {runs[0]["traceId"]}


def test_demo_rejects_bad_arguments() -> None:
    completed = demo("--requests", "0", timeout=60)
    assert completed.returncode == 2
    assert "usage: otel-ort demo" in completed.stderr
    assert "argument --requests: must be at least 6, got 0" in completed.stderr


def test_demo_sends_the_same_spans_over_otlp(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        completed = demo(
            "--output-dir", str(tmp_path), "--otlp-endpoint", receiver.grpc_endpoint, timeout=300
        )
        assert completed.returncode == 0, completed.stderr
        received = receiver.wait_for_spans(62)
    sent = f"OTLP:     spans and metrics to {receiver.grpc_endpoint} over grpc: all sent"
    assert sent in completed.stdout
    assert semconv.METRIC_RUN_DURATION in receiver.metric_names()
    in_file = file_spans(tmp_path / "spans.otlp.jsonl")
    assert sorted(span.span_id.hex() for _, span in received) == sorted(
        span["spanId"] for span in in_file
    )
    services = {kv.value.string_value for r, _ in received for kv in r.attributes}
    assert "otel-ort-demo" in services


def test_demo_says_when_spans_do_not_reach_the_endpoint(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    completed = demo(
        "--requests", "6", "--output-dir", str(tmp_path), "--otlp-endpoint", endpoint, timeout=300
    )
    assert completed.returncode == 1, completed.stderr
    verdict = completed.stdout.split(f"OTLP:     spans and metrics to {endpoint} over grpc: ")[1]
    counted = re.match(
        r"(\d+) spans not sent \(profiles: (\d+) export failed, requests: (\d+) export failed\)",
        verdict,
    )
    assert counted, verdict
    total, profiles, requests = map(int, counted.groups())
    assert total == profiles + requests and profiles > 0
    assert "otel-ort demo: " in completed.stderr
    assert f"spans did not reach {endpoint}: check the endpoint and --protocol" in completed.stderr


def test_demo_hints_at_the_protocol_when_grpc_meets_an_http_port(tmp_path: Path) -> None:
    """gRPC (the default) to an OTLP/HTTP port fails with a hint at ``--protocol``, which then
    gets the spans there."""
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint
        arguments = ("--requests", "6", "--otlp-endpoint", endpoint)
        wrong = demo(*arguments, "--output-dir", str(tmp_path / "grpc"), timeout=300)
        right = demo(
            *arguments,
            "--protocol",
            "http/protobuf",
            "--output-dir",
            str(tmp_path / "http"),
            timeout=300,
        )
    assert wrong.returncode == 1, wrong.stderr
    assert f"OTLP:     spans and metrics to {endpoint} over grpc: " in wrong.stdout
    assert (
        f"spans did not reach {endpoint}: check the endpoint and --protocol (a collector takes "
        "grpc, the default, on port 4317 and http/protobuf on 4318)"
    ) in wrong.stderr
    assert right.returncode == 0, right.stderr
    assert f"OTLP:     spans and metrics to {endpoint} over http/protobuf: all sent" in right.stdout


def test_demo_says_an_output_dir_that_is_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    completed = demo("--output-dir", str(tmp_path / "file"), timeout=60)
    assert completed.returncode == 1
    assert completed.stderr == (
        f"otel-ort demo: {tmp_path / 'file'} is a file, not a directory; choose another "
        "--output-dir\n"
    )


def test_demo_names_an_output_dir_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    completed = demo("--output-dir", str(tmp_path / "file" / "out"), timeout=60)
    assert completed.returncode == 1
    assert completed.stderr == (
        f"otel-ort demo: cannot write {tmp_path / 'file' / 'out'}: Not a directory; choose "
        "another --output-dir\n"
    )


def test_demo_names_a_profile_dir_it_must_not_use(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    completed = demo("--output-dir", str(tmp_path / "open" / "out"), timeout=60)
    assert completed.returncode == 1
    assert completed.stderr.startswith(
        f"otel-ort demo: --output-dir: the profiles' directory "
        f"'{tmp_path / 'open' / 'out' / 'profiles'}' is inside '{tmp_path / 'open'}', which "
        "anyone can write"
    )

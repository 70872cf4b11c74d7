"""The helpers of the load and whole-process cost benchmarks: wrk's report, the stage timers,
the OTLP sink process, the rapidocr models reshaped for the FastAPI example."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnxruntime as ort
import pytest

import otel_ort
from bench.leave_out import FOLDER, NO_CONVERSION, PARTS
from bench.otlp_sink import SinkProcess
from bench.service_load import (
    CONVERSION_FAILED,
    Server,
    Setup,
    chosen_setups,
    conversion_check,
    converts_in_process,
    mean_interval,
    pair_hash_seed,
    paired_ratios,
)
from bench.service_models import SERVED_MODELS, flat_model, request_body
from bench.stage_timers import Hook, StageTimers
from bench.wheel_models import fetch
from bench.wrk import WrkReportError, parse_report, post_script, run_wrk
from otel_ort.perf.counting import PerfCounters
from otel_ort.perf.events import default_event_names, parse_events

# wrk 4.1.0's report (Debian), as printed on this VM against a server answering 404
REPORT = """\
Running 1s test @ http://127.0.0.1:18081/nope
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.44ms    1.67ms  12.20ms   85.93%
    Req/Sec     1.91k   793.69     3.06k    70.00%
  Latency Distribution
     50%  615.00us
     75%    1.94ms
     90%    3.73ms
     99%    1.20s
  1900 requests in 1.00s, 0.94MB read
  Socket errors: connect 0, read 3, write 0, timeout 4
  Non-2xx or 3xx responses: 1900
Requests/sec:   1899.62
Transfer/sec:      0.94MB
"""


def test_wrk_report_figures_in_their_units() -> None:
    result = parse_report(REPORT)
    assert result.requests == 1900
    assert result.requests_per_s == pytest.approx(1899.62)
    assert result.p50_ms == pytest.approx(0.615)
    assert result.p99_ms == pytest.approx(1200.0)
    assert result.errors == 1900 + 3 + 4


def test_wrk_report_without_latency_says_what_is_missing() -> None:
    without = "\n".join(line for line in REPORT.splitlines() if "%  " not in line)
    with pytest.raises(WrkReportError, match=r"50% latency.*--latency"):
        parse_report(without)
    with pytest.raises(WrkReportError, match="Requests/sec"):
        parse_report(REPORT.replace("Requests/sec", "Req"))


def test_paired_ratios_pair_by_repetition() -> None:
    assert paired_ratios([100.0, 50.0], [90.0, 50.0]) == [0.9, 1.0]
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_ratios([1.0], [1.0, 2.0])


def test_the_load_bench_compares_two_valid_different_setups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    never, burst = Setup("never"), Setup("rate:2/s,burst=5")
    assert chosen_setups(parser, never, burst) == (never, burst)
    off, on = Setup("rate:2/s", "off"), Setup("rate:2/s")
    assert chosen_setups(parser, off, on) == (off, on)  # one sampler, perf off and on
    assert off.label == "rate:2/s, perf off" and on.label == "rate:2/s"
    for baseline, compared, said in (
        (never, Setup("never"), "nothing to compare"),
        (never, Setup("bogus:3"), "unknown profile sampler 'bogus:3'"),
    ):
        with pytest.raises(SystemExit):
            chosen_setups(parser, baseline, compared)
        assert said in capsys.readouterr().err


def test_each_pair_of_servers_gets_a_new_hash_seed_unless_the_caller_set_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pair_hash_seed`` (called once per pair of servers, for both): a valid
    ``PYTHONHASHSEED``, a new one each call; the caller's own when it set one, unless that
    is ``random``."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    seeds = {pair_hash_seed() for _ in range(20)}
    assert len(seeds) > 1
    assert all(1 <= int(seed) <= 2**32 - 1 for seed in seeds)
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert pair_hash_seed() == "7"
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    assert pair_hash_seed() != "random"


def test_the_load_bench_knows_which_servers_convert_in_a_conversion_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_ORT_PROFILE_CONVERSION", raising=False)
    assert converts_in_process(Setup("rate:2/s"))
    assert converts_in_process(Setup("rate:2/s", leave_out="kept-file"))
    assert not converts_in_process(Setup("never"))
    assert not converts_in_process(Setup("NEVER"))
    assert not converts_in_process(Setup("rate:2/s", conversion="thread"))
    assert not any(converts_in_process(Setup("rate:2/s", leave_out=part)) for part in NO_CONVERSION)
    monkeypatch.setenv("OTEL_ORT_PROFILE_CONVERSION", "thread")  # the servers inherit it
    assert not converts_in_process(Setup("rate:2/s"))
    assert converts_in_process(Setup("rate:2/s", conversion="process"))


_SERVER_STAND_IN = """
import subprocess, sys, time
if sys.argv[1] != "none":  # a child that sleeps, or one that ends and is never reaped
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    print(child.pid, flush=True)
else:
    print(0, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("child", "log", "said"),
    [
        ("import time; time.sleep(60)", "", None),
        ("none", "", "no conversion process at its end"),
        ("pass", "", "no conversion process at its end"),  # ended, not reaped: a zombie
        ("import time; time.sleep(60)", f"otel-ort: {CONVERSION_FAILED}: it ended", "its log"),
    ],
)
def test_the_load_bench_says_when_a_server_did_not_convert_in_its_conversion_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child: str, log: str, said: str | None
) -> None:
    """A stand-in for a server (a real process, with or without a child process) checked as
    the bench checks each server at the end of its pair."""
    monkeypatch.delenv("OTEL_ORT_PROFILE_CONVERSION", raising=False)
    (tmp_path / "server.log").write_text(log)
    child_pid = 0
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVER_STAND_IN, child], stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        child_pid = int(process.stdout.readline())
        deadline = time.monotonic() + 30
        while child == "pass" and time.monotonic() < deadline:  # until it has ended
            with open(f"/proc/{child_pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        for setup in (Setup("rate:2/s"), Setup("never")):
            why = conversion_check(Server(setup, 0, process, tmp_path / "server.log"))
            if said is None or setup.sampler == "never":
                assert why is None
            else:
                assert why is not None and said in why
    finally:
        if child_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
        process.kill()
        process.wait()
    ended = conversion_check(Server(Setup("rate:2/s"), 0, process, tmp_path / "server.log"))
    assert ended == "it ended (exit status -9)"


def test_the_load_bench_gives_the_mean_an_interval_over_its_pairs_of_servers() -> None:
    # two pairs of servers, two repetitions each: the pairs' means are 0.96 and 0.98
    assert mean_interval([0.95, 0.97, 0.97, 0.99], 2) == "-3.0 % ± 12.7"
    # the same blocks from one pair: no interval (its own speed is not averaged out)
    assert mean_interval([0.95, 0.97, 0.97, 0.99], 1) == "-3.0 % ± n/a (one pair of servers)"
    assert Setup("rate:2/s", None, "conversion").label == "rate:2/s, without conversion"


# one profiled run, in a process started as a bench server starts, converted on the worker
# thread (an in-memory exporter takes every span) or in the conversion process (node spans
# to an OTLP/JSON file, as the process encodes them; the run span to the in-memory one):
# what reached the span processors and the profile folder
_LEAVE_OUT_PROBE = """
import json, os, sys
import numpy as np, onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_ort import OrtInstrumentor, flush_profiles
from otel_ort.demo_model import mlp_model
from otel_ort.export.otlp_encoding import JsonSpans
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.profiling import conversion as converter_module
from otel_ort.sampling import Always
folder, conversion = sys.argv[1], sys.argv[2]
ort_files = []  # per profiled run: whether ORT wrote its file (seen before the conversion)
convert = converter_module.Converter.convert  # the hook's, if it replaced it
def convert_seeing_ort_file(self, store, span, end_ns, run, *rest):
    ort_files.append(bool(store.written(run.files)))
    return convert(self, store, span, end_ns, run, *rest)
converter_module.Converter.convert = convert_seeing_ort_file
exporter = InMemorySpanExporter()
provider = TracerProvider()
memory = SimpleSpanProcessor(exporter)
provider.add_span_processor(memory)
output = folder + "-spans.jsonl"
if conversion == "process":
    memory.takes_profile_spans = False
    provider.add_span_processor(
        ProfileExportProcessor(OtlpJsonFileSpanExporter(output), JsonSpans(), delay_ms=0)
    )
OrtInstrumentor().instrument(tracer_provider=provider, profile_sampler=Always(),
                             profile_dir=folder, profile_conversion=conversion)
process = OrtInstrumentor()._profiler._converter.process
if process is not None:
    assert process.start(), process.unavailable  # the run goes through it, not the worker
session = ort.InferenceSession(mlp_model(depth=3), providers=["CPUExecutionProvider"])
session.run(None, {"x": np.zeros((1, 256), np.float32)})
flush_profiles()
spans = exporter.get_finished_spans()
nodes = [list(span.attributes) for span in spans if not span.name.startswith("onnxruntime.")]
if os.path.exists(output):
    nodes += [
        [attribute["key"] for attribute in span["attributes"]]
        for line in open(output)
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
counted = [keys for keys in nodes if any(key.startswith("perf.") for key in keys)]
kept = [name for name in os.listdir(folder) if name.endswith(".json.gz")]
print(json.dumps({"runs": [span.name for span in spans].count("onnxruntime.run"),
                  "nodes": len(nodes), "counted": len(counted), "kept": len(kept),
                  "ort_files": ort_files,
                  "in_process": process is not None and process.conversions > 0}))
"""


def bench_server_env(part: str) -> dict[str, str]:
    """The environment ``bench.service_load`` gives a server that leaves ``part`` out."""
    path = [str(FOLDER), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OTEL_ORT_BENCH_LEAVE_OUT": part}


def perf_counts_here() -> bool:
    counters = PerfCounters(parse_events(list(default_event_names(False))), None, False)
    return counters.prepare(quiet=True)


@pytest.mark.parametrize("conversion", ["thread", "process"])
@pytest.mark.parametrize(
    ("part", "nodes", "counted", "kept"),
    [
        ("nothing", True, True, 1),
        ("conversion", False, False, 0),
        ("ort-profiling", False, False, 0),
        ("delivery", False, False, 1),
        ("kept-file", True, True, 0),
        ("perf-work", True, False, 1),
        ("profiled-run", False, False, 0),
    ],
)
def test_a_bench_server_leaves_out_the_part_it_is_told_to(
    tmp_path: Path, part: str, nodes: bool, counted: bool, kept: int, conversion: str
) -> None:
    """``bench/leave_out`` in a real process, its profile converted on the worker thread or
    in the conversion process: the run span always ends; the node spans, their perf counts
    and the kept file come only where their part is left in."""
    done = subprocess.run(
        [sys.executable, "-c", _LEAVE_OUT_PROBE, str(tmp_path / "profiles"), conversion],
        check=False,
        env=bench_server_env(part),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert (got["runs"], bool(got["nodes"]), got["kept"]) == (1, nodes, kept)
    if part == "profiled-run":  # selected, then run as an unprofiled run: nothing handed on
        assert got["ort_files"] == []
    else:
        assert got["ort_files"] == [part != "ort-profiling"]  # ORT profiled the run, or not
    setup = Setup("always", conversion=conversion, leave_out=part)
    assert got["in_process"] is converts_in_process(setup)  # as the load bench expects
    if perf_counts_here():  # else no node is counted either way
        assert bool(got["counted"]) is counted
    else:
        assert not got["counted"]


def test_a_bench_server_that_cannot_leave_its_part_out_ends_saying_why() -> None:
    """Python would go on after an error in a ``sitecustomize``: the hook ends the process,
    so that the bench never compares two equal servers."""
    done = subprocess.run(
        [sys.executable, "-c", "print('served')"],
        check=False,
        env=bench_server_env("spans"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "served" not in done.stdout
    assert "unknown part 'spans'" in done.stderr
    assert set(PARTS) == {
        "conversion",
        "delivery",
        "kept-file",
        "ort-profiling",
        "perf-work",
        "profiled-run",
    }


class Worked:
    """Functions for the stage timers to hook."""

    def outer(self, inner_s: float, own_s: float) -> str:
        spin(own_s)
        inner(inner_s)
        return "outer's own result"


class Derived(Worked):
    pass


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def inner(seconds: float) -> None:
    spin(seconds)


def test_stage_timers_count_each_stage_once_and_put_everything_back() -> None:
    original_outer, original_inner = Worked.outer, inner
    hooks = (
        Hook("outer", __name__, "Derived.outer"),  # inherited: removed again on exit
        Hook("inner", __name__, "inner"),
        Hook("gone", __name__, "Worked.renamed"),
        Hook("no module", "tests.no_such_module", "f"),
    )
    with StageTimers(hooks) as timers:
        assert Derived().outer(0.06, 0.03) == "outer's own result"
        other = threading.Thread(target=globals()["inner"], args=(0.02,), name="other")
        other.start()
        other.join()
        taken = timers.take()
        assert timers.take() == {}
    me = threading.current_thread().name
    assert taken[("outer", me)] == pytest.approx(0.03e9, rel=0.3)  # without inner's time
    assert taken[("inner", me)] == pytest.approx(0.06e9, rel=0.3)
    assert taken[("inner", "other")] == pytest.approx(0.02e9, rel=0.3)
    assert timers.missing == list(hooks[2:])
    assert "outer" not in vars(Derived)
    assert Worked.outer is original_outer
    assert globals()["inner"] is original_inner


@pytest.fixture(scope="module")
def wheel_cache() -> Path:
    cache = Path(os.environ.get("OTEL_ORT_WHEEL_CACHE", "/tmp/otel-ort-wheels"))
    try:
        for served in SERVED_MODELS.values():
            fetch(served.source, cache)
    except RuntimeError as exc:
        pytest.skip(f"the rapidocr wheel could not be downloaded: {exc}")
    return cache


@pytest.mark.e2e
@pytest.mark.parametrize("key", sorted(SERVED_MODELS))
def test_served_model_is_the_wheel_model_on_rows(key: str, wheel_cache: Path) -> None:
    served = SERVED_MODELS[key]
    rows = np.asarray(json.loads(request_body(served))["inputs"], dtype=np.float32)
    flat = ort.InferenceSession(str(flat_model(served, wheel_cache)))
    (got,) = flat.run(None, {flat.get_inputs()[0].name: rows})
    wheel = ort.InferenceSession(str(fetch(served.source, wheel_cache)))
    (expected,) = wheel.run(None, {"x": rows.reshape(served.source.shape)})
    if served.decode:
        expected = expected.argmax(axis=2)
    assert got.ndim == 2  # what the example's response can carry
    np.testing.assert_array_equal(got, expected)


@pytest.mark.e2e
def test_sink_process_counts_what_each_receiver_took() -> None:
    with SinkProcess(2) as sink:
        telemetry = otel_ort.configure(
            endpoint=sink.endpoints[1], metrics_export=False, set_global=False
        )
        tracer = telemetry.tracer_provider.get_tracer("test")
        for name in ("onnxruntime.run", "onnxruntime.run", "other"):
            tracer.start_span(name).end()
        telemetry.shutdown()
        deadline = time.monotonic() + 10
        while (received := sink.received())[1].spans < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert received[0].spans == 0
    assert (received[1].spans, received[1].run_spans) == (3, 2)


class _Predict(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []
    status = 200

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(self.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """wrk drops its connections mid-request when its time is up: not an error here."""


@pytest.fixture
def predict_server() -> Iterator[ThreadingHTTPServer]:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (`make bench` installs it: apt-get install wrk)")
    _Predict.bodies, _Predict.status = [], 200
    server = _QuietServer(("127.0.0.1", 0), _Predict)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.e2e
@pytest.mark.parametrize("status", [200, 500])
def test_wrk_posts_the_body_and_counts_failures(
    status: int, predict_server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    _Predict.status = status
    body = tmp_path / "body.json"
    body.write_bytes(b'{"inputs": [[0.5, 0.25]]}')
    script = tmp_path / "post.lua"
    script.write_text(post_script(body))
    url = f"http://127.0.0.1:{predict_server.server_address[1]}/predict"
    result = run_wrk(url, script, seconds=1, threads=1, connections=2)
    assert result.requests > 0 and result.requests_per_s > 0
    assert 0 < result.p50_ms <= result.p99_ms
    assert set(_Predict.bodies) == {body.read_bytes()}
    assert result.errors == (0 if status == 200 else result.requests)

"""The conversion process: profiles converted in a process of otel-ort's give the spans and
kept files the worker thread gives, through the real OTLP exporter to a real receiver; a
process that dies, cannot start or is forked away from is replaced or given up, and said."""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import OrtInstrumentor, configure, flush_profiles, semconv
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.failures import failure_counts
from otel_ort.profiles.spans import SpanBuilder
from otel_ort.profiling import conversion_process, frames
from otel_ort.profiling.conversion_job import (
    ConversionJob,
    Converted,
    SpanJob,
    SpanLayout,
    convert_job,
)
from otel_ort.profiling.conversion_process import ConversionProcess, Lost
from otel_ort.profiling.frames import FrameTimeout, read_frame, write_frame
from otel_ort.profiling.run_options import run_profiling_switch
from tests.conftest import instrumentation
from tests.helpers.kept_files import kept_document
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import kernel_event, model_run, node_event, write

pytestmark = pytest.mark.e2e
FEEDS = {"x": np.ones((4, 32), np.float32)}


@pytest.fixture(autouse=True, scope="module")
def _switch_found() -> None:
    run_profiling_switch()


def _process() -> ConversionProcess | None:
    process: ConversionProcess | None = OrtInstrumentor()._profiler._converter.process
    return process


def _one_run_in_the_process(mlp_path: Path) -> tuple[ort.InferenceSession, ConversionProcess, int]:
    """A session of the MLP, the profiler's conversion process ready, and one profiled run
    converted there; the process's id."""
    session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
    process = _started()
    _profiled(session, 1)
    assert process.pid is not None and process.conversions == 1
    return session, process, process.pid


def _fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """``sys.executable`` a shell script named ``python3`` that runs ``script``."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(fake))


def _started() -> ConversionProcess:
    """The profiler's conversion process, started and ready (the worker would convert the
    first runs itself while it starts)."""
    process = _process()
    assert process is not None and process.start()
    return process


@contextmanager
def _exported(
    receiver: OtlpReceiver, directory: Path, conversion: str, **options: Any
) -> Iterator[TracerProvider]:
    """ORT instrumented to profile every run, its spans exported over OTLP/gRPC by
    ``configure``'s pipeline (not made global)."""
    telemetry = configure(
        endpoint=receiver.grpc_endpoint, insecure=True, metrics_export=False, set_global=False
    )
    try:
        with instrumentation(
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
            profile_sampler="always",
            profile_dir=str(directory),
            profile_conversion=conversion,
            **options,
        ):
            yield telemetry.tracer_provider
    finally:
        telemetry.shutdown(timeout=30)


def _profiled(session: ort.InferenceSession, runs: int) -> None:
    for _ in range(runs):
        session.run(None, FEEDS)
    assert flush_profiles(timeout=60)


def _by_run(receiver: OtlpReceiver) -> list[tuple[dict[str, Any], list[tuple[Any, ...]]]]:
    """Each run span's attributes, with its node spans' names, attributes, resource and
    scope (sorted), less what differs from run to run (times, ids, file names)."""
    with receiver._lock:
        placed = [
            (resource_spans.resource, scope_spans.scope, span)
            for request in receiver.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
    spans = [span for _, _, span in placed]
    where = {
        id(span): (str(sorted(str(a) for a in resource.attributes)), scope.name, scope.version)
        for resource, scope, span in placed
    }
    varying = ("duration", "_us", "profile.file", "thread", "time")

    def plain(span: Any) -> dict[str, Any]:
        return {
            a.key: "counted" if a.key.startswith("perf.") else str(a.value)
            for a in span.attributes
            if not any(part in a.key for part in varying)
        }

    runs = []
    for run in (s for s in spans if s.name == semconv.SPAN_RUN):
        nodes = sorted(
            (s.name, plain(s), where[id(s)]) for s in spans if s.parent_span_id == run.span_id
        )
        runs.append((plain(run), nodes))
    return runs


def test_the_process_gives_the_spans_and_files_the_thread_gives(
    tmp_path: Path, mlp_path: Path
) -> None:
    """The same runs, converted in the process and on the worker thread: the same node
    spans (names, attributes, perf counts among them, parents) and kept files that read the
    same, written 0600; ORT's files deleted, retention applied to the files the process
    wrote (a limit of 3 files for 4 runs). The process runs at a lower CPU priority."""
    results = {}
    for conversion in ("process", "thread"):
        with OtlpReceiver() as receiver:
            directory = tmp_path / conversion
            options = {"perf_events": "default", "profile_max_files": 3}
            with _exported(receiver, directory, conversion, **options):
                session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
                process = _started() if conversion == "process" else _process()
                _profiled(session, 4)
                profiler = OrtInstrumentor()._profiler
                assert profiler is not None
                assert profiler.counts().get("files_deleted") == 1
                if conversion == "process":
                    assert process is not None and process.pid is not None
                    assert process.conversions == 4
                    pid = process.pid
                    niceness = os.getpriority(os.PRIO_PROCESS, pid)
                else:
                    assert process is None
            receiver.wait_for_spans(4 * 3)
            results[conversion] = _by_run(receiver)
            kept = sorted(directory.glob("*.json.gz"))
            assert len(kept) == 3
            assert all(path.stat().st_mode & 0o777 == 0o600 for path in kept)
            assert not list(directory.glob("*.tmp"))
            assert not list((directory / ".pending").glob("*.json"))
            document = kept_document(kept[0])
            assert document["otherData"]["trace_id"]
            results[conversion + " kept"] = sorted(
                e["name"] for e in document["traceEvents"] if e.get("cat") == "Node"
            )
    assert results["process"] == results["thread"]
    assert any(
        key.startswith("perf.") for _, nodes in results["process"] for _, a, _ in nodes for key in a
    )
    assert len(results["process"]) == 4 and all(nodes for _, nodes in results["process"])
    assert results["process kept"] == results["thread kept"]
    assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0) + conversion_process.NICENESS)
    with pytest.raises(ProcessLookupError):  # ended with the profiler
        os.kill(pid, 0)


@pytest.mark.parametrize("takes_profile_spans", [True, False])
def test_a_processor_that_needs_span_objects_keeps_conversions_on_the_worker(
    tmp_path: Path, mlp_path: Path, takes_profile_spans: bool
) -> None:
    """An in-memory exporter's processor needs span objects: the worker converts, and no
    process starts. Marked as taking no profile spans (it gets the run spans only), it
    leaves the provider with no processor for them: the process builds the node spans for
    the run span's summary, sends none back, and makes the kept file."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    memory = SimpleSpanProcessor(exporter)
    memory.takes_profile_spans = takes_profile_spans  # type: ignore[attr-defined]
    provider.add_span_processor(memory)
    with instrumentation(
        tracer_provider=provider,
        profile_sampler="always",
        profile_dir=str(tmp_path),
        perf_events="off",
    ):
        session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
        process = _process()
        assert process is not None
        if not takes_profile_spans:
            assert process.start()
        _profiled(session, 2)
        conversions, pid = process.conversions, process.pid
    assert (conversions, pid is None) == ((0, True) if takes_profile_spans else (2, False))
    spans = [s for s in exporter.get_finished_spans() if s.name != semconv.SPAN_SESSION_CREATE]
    runs = [s for s in spans if s.name == semconv.SPAN_RUN]
    assert len(runs) == 2 and len(spans) == (2 + 2 * 2 if takes_profile_spans else 2)
    assert all(s.attributes is not None and s.attributes[semconv.RUN_NODE_COUNT] == 2 for s in runs)
    assert len(list(tmp_path.glob("*.json.gz"))) == 2


def test_a_killed_process_is_replaced_and_said(
    tmp_path: Path, mlp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``SIGTERM`` and ``SIGINT`` leave the process be; one killed between runs is replaced
    by the next run (a warning says why), and no run loses its spans."""
    with OtlpReceiver() as receiver:
        with _exported(receiver, tmp_path, "process", perf_events="off"):
            session, process, first = _one_run_in_the_process(mlp_path)
            os.kill(first, signal.SIGTERM)  # ignored: a group's stop reaches it too
            os.kill(first, signal.SIGINT)
            _profiled(session, 1)
            assert process.pid == first
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while process.pid is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            with caplog.at_level(logging.WARNING, logger="otel_ort"):
                _profiled(session, 1)
            assert process.pid not in (None, first)
        spans = receiver.wait_for_spans(3 * 3)
    runs = [s for _, s in spans if s.name == semconv.SPAN_RUN]
    assert len(runs) == 3
    assert not any(a.key == semconv.PROFILE_ERROR for s in runs for a in s.attributes)
    assert "the conversion process failed: it had ended (exit status -9)" in caplog.text


@pytest.mark.parametrize("why", ["an interpreter that exits", "another otel-ort version"])
def test_a_process_that_cannot_start_leaves_conversions_on_the_worker(
    tmp_path: Path,
    mlp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    why: str,
) -> None:
    """``sys.executable`` a program that exits at once, or a process that says it is
    another otel-ort's: three failed starts, then the worker converts for good, and says so
    once; every run keeps its spans."""
    if why == "an interpreter that exits":
        _fake_python(tmp_path, monkeypatch, "echo not otel-ort >&2\nexit 3")
    else:
        monkeypatch.setattr(conversion_process, "__version__", "0.0.0-not-this-one")
    with OtlpReceiver() as receiver:
        with (
            caplog.at_level(logging.WARNING, logger="otel_ort"),
            _exported(receiver, tmp_path / "profiles", "process", perf_events="off"),
        ):
            session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
            process = _process()
            assert process is not None
            for _ in range(conversion_process.MAX_FAILURES):
                assert not process.start()
                _profiled(session, 1)
            assert "3 failures in a row" in process.unavailable
            _profiled(session, 1)
        spans = receiver.wait_for_spans((conversion_process.MAX_FAILURES + 1) * 3)
    runs = [s for _, s in spans if s.name == semconv.SPAN_RUN]
    assert len(runs) == conversion_process.MAX_FAILURES + 1
    assert not any(a.key == semconv.PROFILE_ERROR for s in runs for a in s.attributes)
    assert caplog.text.count("converted on the profiler's worker thread from now on") == 1


def test_a_process_slow_to_start_holds_no_run_back(
    tmp_path: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the process has not said it is ready (here it never will), the worker converts
    the runs itself: none waits for it."""
    _fake_python(tmp_path, monkeypatch, "exec sleep 60")
    with OtlpReceiver() as receiver:
        with _exported(receiver, tmp_path / "profiles", "process", perf_events="off"):
            session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
            began = time.monotonic()
            _profiled(session, 3)
            took = time.monotonic() - began
            process = _process()
            assert process is not None and process.pid is not None  # started, not ready
            assert process.conversions == 0 and not process.unavailable
        spans = receiver.wait_for_spans(1 + 3 * 3)
    assert took < conversion_process.START_TIMEOUT_S / 2
    assert len([s for _, s in spans if s.name == semconv.SPAN_RUN]) == 3
    assert len(spans) == 1 + 3 * 3


def test_a_run_the_process_does_not_answer_in_time_is_said_on_its_span(
    tmp_path: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stopped (``SIGSTOP``) past the job's timeout: that run's span says why it
    has no node spans and counts as ``profile_error``; the next run starts a new process."""
    monkeypatch.setattr(conversion_process, "JOB_TIMEOUT_S", 1.0)
    with OtlpReceiver() as receiver:
        with _exported(receiver, tmp_path, "process", perf_events="off"):
            session, process, stopped = _one_run_in_the_process(mlp_path)
            os.kill(stopped, signal.SIGSTOP)
            _profiled(session, 1)
            _profiled(session, 1)
            assert process.pid not in (None, stopped)
            counts = OrtInstrumentor()._profiler.counts()
        spans = receiver.wait_for_spans(1 + 3 + 2 + 2)
    runs = [s for _, s in spans if s.name == semconv.SPAN_RUN]
    errors = [
        a.value.string_value for s in runs for a in s.attributes if a.key == semconv.PROFILE_ERROR
    ]
    assert len(runs) == 3 and len(spans) == 1 + 3 + 2 + 2  # the lost run has no node spans
    assert len(errors) == 1 and "it stopped while converting this run (FrameTimeout" in errors[0]
    assert counts[semconv.PROFILE_ERROR_OUTCOME] == 1
    with pytest.raises(ProcessLookupError):
        os.kill(stopped, 0)  # killed and reaped


def test_a_forked_child_starts_a_process_of_its_own(tmp_path: Path, mlp_path: Path) -> None:
    """After ``os.fork()`` the parent's process stays the parent's: the child's profiled run
    starts its own, and the parent's still converts (spans to an OTLP/JSON file: the
    process encodes them as JSON)."""
    output = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(
        ProfileExportProcessor(OtlpJsonFileSpanExporter(output), JsonSpans())
    )
    with instrumentation(
        tracer_provider=provider,
        profile_sampler="always",
        profile_dir=str(tmp_path / "profiles"),
        perf_events="off",
    ):
        session, process, parent_helper = _one_run_in_the_process(mlp_path)
        assert parent_helper is not None
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child reports through the pipe)
            code = 1
            try:
                assert process.pid is None
                _profiled(session, 1)
                os.write(write_end, str(process.pid).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        _, status = os.waitpid(child, 0)
        child_helper = os.read(read_end, 64).decode()
        os.close(read_end)
        assert os.waitstatus_to_exitcode(status) == 0
        assert child_helper and int(child_helper) != parent_helper
        _profiled(session, 1)
        assert process.pid == parent_helper
    provider.shutdown()
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    names = [
        span["name"]
        for line in lines
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert len(names) == 3 * 2  # the node spans of three runs, the child's among them


def _child_environment(mlp_path: Path) -> dict[str, str]:
    """The environment of the conversion process of one profiled run of the MLP."""
    *_, pid = _one_run_in_the_process(mlp_path)
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ({}, {"MALLOC_TRIM_THRESHOLD_": str(32 << 20), "MALLOC_MMAP_THRESHOLD_": str(4 << 20)}),
        (
            {"MALLOC_TRIM_THRESHOLD_": "12345"},
            {"MALLOC_TRIM_THRESHOLD_": "12345", "MALLOC_MMAP_THRESHOLD_": str(4 << 20)},
        ),
        (
            {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=999"},
            {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=999"},
        ),
    ],
)
def test_the_process_reuses_its_memory_unless_the_user_tuned_malloc(
    tmp_path: Path,
    mlp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    user: dict[str, str],
    expected: dict[str, str],
) -> None:
    """The process's environment keeps glibc's freed memory for the next conversion, unless
    the user tuned malloc; OpenBLAS starts no pool there, whatever the user set for theirs."""
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**user, "OPENBLAS_NUM_THREADS": "8"}.items():
        monkeypatch.setenv(name, value)
    with instrumentation(profile_sampler="always", profile_dir=str(tmp_path), perf_events="off"):
        environment = _child_environment(mlp_path)
    malloc = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    assert {name: environment[name] for name in malloc if name in environment} == expected
    assert environment["OPENBLAS_NUM_THREADS"] == "1"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "8"  # this process's own: untouched


def test_the_answers_pipe_holds_a_runs_answer(tmp_path: Path, mlp_path: Path) -> None:
    """The pipe the answers come back on holds 512 KiB (64 KiB by default here), so that a run's
    answer comes in one write and the worker, waiting for it, wakes once; the pipe the jobs
    go on keeps Linux's default, as each pipe counts against its user's pipe buffers."""
    first, second = os.pipe()
    default = fcntl.fcntl(first, fcntl.F_GETPIPE_SZ)
    try:
        fcntl.fcntl(first, fcntl.F_SETPIPE_SZ, conversion_process.ANSWER_PIPE_BYTES)
    except PermissionError:
        pytest.skip("this user may not make a pipe of 512 KiB here (fs.pipe-max-size)")
    finally:
        os.close(first)
        os.close(second)
    with instrumentation(profile_sampler="always", profile_dir=str(tmp_path), perf_events="off"):
        _, process, _ = _one_run_in_the_process(mlp_path)
        child = process._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        answers = fcntl.fcntl(child.stdout.fileno(), fcntl.F_GETPIPE_SZ)
        jobs = fcntl.fcntl(child.stdin.fileno(), fcntl.F_GETPIPE_SZ)
    assert (answers, jobs) == (conversion_process.ANSWER_PIPE_BYTES, default)


def test_frames_go_both_ways_and_say_what_went_wrong() -> None:
    """A frame round-trips; a pipe closed between frames is ``None``, inside one an
    ``EOFError``; no frame in time is a ``FrameTimeout``."""
    read_end, write_end = os.pipe()
    value = {"spans": [b"x" * 300_000]}  # more than a pipe holds: read in several pieces
    writer = threading.Thread(target=write_frame, args=(write_end, value))
    writer.start()
    assert read_frame(read_end, timeout_s=5) == value
    writer.join()
    with pytest.raises(FrameTimeout):
        read_frame(read_end, timeout_s=0.05)
    os.write(write_end, (100).to_bytes(8, "little") + b"abc")
    os.close(write_end)
    with pytest.raises(EOFError):
        read_frame(read_end, timeout_s=5)
    os.close(read_end)
    read_end, write_end = os.pipe()
    os.close(write_end)
    assert read_frame(read_end) is None
    os.close(read_end)


def _job(
    path: Path, layout: SpanLayout, encodings: tuple[str, ...] | None, kept: Path | None = None
) -> ConversionJob:
    spans = SpanJob(0x1234, 0x99, layout, encodings)
    kept_path = str(kept or path.with_name(f"{path.stem}-kept.json.gz"))
    other_data = {"model": "m"}
    return ConversionJob(
        str(path), 1_000_000_000, None, spans, other_data, (7, "main"), 42, kept_path
    )


def test_a_frame_longer_than_its_first_buffer_is_read_whole_and_a_wild_length_is_not_allocated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frame over ``_FIRST_BUFFER`` grows its buffer as its bytes come; a length that no
    frame has (a stray print read as one) allocates no more than that before failing."""
    monkeypatch.setattr(frames, "_FIRST_BUFFER", 1000)
    read_end, write_end = os.pipe()
    value = [b"y" * 50_000, b"z" * 7]
    writer = threading.Thread(target=write_frame, args=(write_end, value))
    writer.start()
    assert read_frame(read_end, timeout_s=5) == value
    writer.join()
    os.write(write_end, (1 << 60).to_bytes(8, "little") + b"hello")
    os.close(write_end)
    with pytest.raises(EOFError, match="5 of 1152921504606846976 bytes"):
        read_frame(read_end, timeout_s=5)
    os.close(read_end)


def test_a_job_gives_in_the_process_what_it_gives_here(tmp_path: Path) -> None:
    """Node and kernel spans of a profile with GPU kernels, encoded there as protobuf and as
    JSON, are the spans built here (span ids aside, which are random), with the same
    summary and the same kept file."""
    events = [model_run(0, 100)]
    for at in range(6):
        events.append(node_event(f"n{at}", "MatMul", 10 * at, 8, node_index=str(at)))
        events.append(kernel_event(f"k{at}", f"n{at}", 10 * at + 1, 5))
    path = write(tmp_path / "run.json", events)
    layout = SpanLayout(None, None, 4_000_000)
    process = ConversionProcess()
    assert process.start()
    kept_there, kept_here = tmp_path / "there.json.gz", tmp_path / "here.json.gz"
    try:
        there = process.convert(_job(path, layout, ("protobuf", "json"), kept_there))
    finally:
        process.close()
    assert isinstance(there, Converted) and not there.problems
    builder = SpanBuilder(TracerProvider(), max_trace_bytes=layout.max_trace_bytes)
    here = convert_job(_job(path, layout, None, kept_here), builder)
    assert here.drafts is not None and len(here.drafts) == 12
    assert (there.nodes, there.summary) == (here.nodes, here.summary)
    assert there.kept_size == kept_there.stat().st_size > 0  # written there, 0600
    assert here.kept_size == kept_here.stat().st_size
    assert kept_there.stat().st_mode & 0o777 == 0o600
    assert gzip.decompress(kept_there.read_bytes()) == gzip.decompress(kept_here.read_bytes())
    assert path.exists()  # ORT's file is the worker's to delete

    def without_ids(entry: bytes) -> Any:  # a ScopeSpans.spans entry: field 2, its length
        (span,) = ScopeSpans.FromString(entry).spans
        assert span.name and span.trace_id == (0x1234).to_bytes(16, "big")
        span.span_id, span.parent_span_id = b"", b""
        return span

    protobuf = [without_ids(entry) for entry in there.encoded["protobuf"]]
    expected = [without_ids(entry) for entry in ProtobufSpans().spans(here.drafts)]
    assert protobuf == expected
    names = [json.loads(data)["name"] for data in there.encoded["json"]]
    assert names == [span.name for span in expected]


def test_span_limits_reach_the_process(tmp_path: Path) -> None:
    """A provider's span limits (attribute count, value length) cut the spans built there as
    the SDK cuts its own: the same spans as a builder of that provider makes here."""
    events = [model_run(0, 100), node_event("a_long_node_name", "MatMul", 1, 8, extra="x" * 40)]
    path = write(tmp_path / "run.json", events)
    limits = SpanLimits(max_span_attributes=3, max_span_attribute_length=8)
    layout = SpanLayout(3, 8, 4_000_000)
    process = ConversionProcess()
    assert process.start()
    try:
        there = process.convert(_job(path, layout, ("protobuf",)))
    finally:
        process.close()
    assert isinstance(there, Converted)
    builder = SpanBuilder(TracerProvider(span_limits=limits), max_trace_bytes=4_000_000)
    here = convert_job(_job(path, layout, None), builder)
    assert here.drafts is not None
    (span,) = (ScopeSpans.FromString(entry).spans[0] for entry in there.encoded["protobuf"])
    (expected,) = (ScopeSpans.FromString(e).spans[0] for e in ProtobufSpans().spans(here.drafts))
    assert len(span.attributes) == 3 and span.dropped_attributes_count > 0
    assert all(len(a.value.string_value) <= 8 for a in span.attributes)
    span.span_id = expected.span_id
    assert span == expected


def test_a_conversion_that_fails_there_is_said_and_the_process_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job ``convert_job`` raises on (a bug of otel-ort's: here a layout no builder takes)
    comes back ``Lost``, logged with the process's traceback, and counts as a failure of the
    process; the next job is answered by a new one."""
    path = write(tmp_path / "run.json", [model_run(0, 100), node_event("n", "Add", 1, 2)])
    process = ConversionProcess()
    assert process.start()
    try:
        with caplog.at_level(logging.ERROR, logger="otel_ort"):
            lost = process.convert(_job(path, SpanLayout(None, None, -1), ("protobuf",)))
        assert isinstance(lost, Lost)
        assert "max_trace_bytes must be >= 0" in lost.detail
        assert "max_trace_bytes must be >= 0" in caplog.text
        assert "a profile's conversion failed" in failure_counts()
        assert process.start()  # a new one
        done = process.convert(_job(path, SpanLayout(None, None, 1000), ("protobuf",)))
        assert isinstance(done, Converted) and len(done.encoded["protobuf"]) == 1
    finally:
        process.close()
    assert process.pid is None


@pytest.mark.parametrize("renamed", [True, False], ids=["half-written", "written"])
def test_a_conversion_lost_after_writing_its_kept_file_leaves_no_file_uncounted(
    tmp_path: Path, mlp_path: Path, monkeypatch: pytest.MonkeyPatch, renamed: bool
) -> None:
    """The process converts a run and writes its kept file, then its answer breaks: the run
    is lost (said on its span), and the kept file counts for retention; a half-written one
    (still ``.tmp``, as if the process had been killed before its rename) is deleted."""
    directory = tmp_path / "kept"
    real_read_frame = frames.read_frame

    def answer_breaks(fd: int, timeout_s: float | None = None) -> Any:
        real_read_frame(fd, timeout_s)  # converted there, the kept file written
        if renamed:
            for kept in directory.glob("*.json.gz"):
                kept.rename(f"{kept}.tmp")
        raise EOFError("the answer broke")

    with OtlpReceiver() as receiver:
        with _exported(receiver, directory, "process", profile_max_files=1):
            session = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
            _started()
            monkeypatch.setattr(conversion_process, "read_frame", answer_breaks)
            _profiled(session, 1)
            monkeypatch.setattr(conversion_process, "read_frame", real_read_frame)
            after_lost = sorted(directory.glob("*.json.gz*"))
            _profiled(session, 1)  # converted by the worker while a new process starts
            profiler = OrtInstrumentor()._profiler
            assert profiler is not None
            deleted = profiler.counts().get("files_deleted", 0)
        lost = [
            span
            for request in receiver.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
            if any(
                a.key == semconv.PROFILE_ERROR and "the answer broke" in a.value.string_value
                for a in span.attributes
            )
        ]
    assert len(lost) == 1
    assert [path.suffix for path in after_lost] == ([] if renamed else [".gz"])
    assert deleted == (0 if renamed else 1)  # the lost run's file counted, then retired
    assert len(list(directory.glob("*.json.gz"))) == 1
    assert not list(directory.glob("*.tmp")) and not list((directory / ".pending").glob("*.json"))

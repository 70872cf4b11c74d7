"""Locks a parent's thread holds at a fork (gunicorn's pre-forked workers) are free in the child."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import failures, flush_profiles, profile_next_run, semconv
from otel_ort._util import forking
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from otel_ort.instrumentation import session_facts
from otel_ort.perf import pfm
from otel_ort.profiling import recorded_options, run_options
from otel_ort.profiling.pool_log import PoolLogs
from otel_ort.profiling.session_runs import session_runs
from otel_ort.sampling import RateLimited
from tests.conftest import Telemetry, attrs, held_runs, instrumentation


def locked_in_child(locks: dict[str, Callable[[], threading.Lock]]) -> dict[str, bool]:
    """Fork while holding every lock; which of them the child finds held."""
    held = [get() for get in locks.values()]
    read_end, write_end = os.pipe()
    for lock in held:
        lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                found = {name: get().locked() for name, get in locks.items()}
                os.write(write_end, json.dumps(found).encode())
            finally:
                os._exit(0)
    finally:
        for lock in held:
            lock.release()
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        ready, _, _ = select.select([pipe], [], [], 30)
        found = json.loads(pipe.read()) if ready else {}
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return found


def test_otel_orts_locks_are_free_in_a_forked_child(tmp_path: Path) -> None:
    exporter = CountingSpanExporter(InMemorySpanExporter(), Endpoint("http://localhost:4318"))
    file_exporter = OtlpJsonFileSpanExporter(tmp_path / "spans.jsonl")
    limiter = RateLimited(1.0)
    switch = run_options.run_profiling_switch()
    assert not isinstance(switch, run_options.Unrecognized), switch
    pool_logs = PoolLogs(switch, str(tmp_path))

    class Session:
        """Stands for an instrumented session: its runs are kept in its __dict__."""

    session = Session()
    session_runs(session)  # the parent's
    locks: dict[str, Callable[[], threading.Lock]] = {
        "failures": lambda: failures._lock,
        "session facts": lambda: session_facts._collect_lock,
        "recorded options": lambda: recorded_options._recorded_lock,
        "run-profiling switch": lambda: run_options._found_lock,
        "thread-pool logs' session": lambda: pool_logs._lock,
        # the child starts the session's runs afresh: the parent's in flight are not its own
        "a session's runs": lambda: session_runs(session)._changed._lock,  # type: ignore[attr-defined]
        "counting exporter": lambda: exporter._lock,
        "file exporter": lambda: file_exporter._lock,
        "libpfm loading": lambda: pfm._load_lock,
        "RateLimited": lambda: limiter._lock,
    }
    with contextlib.suppress(pfm.PfmUnavailableError):  # optional: its loading lock is checked
        libpfm = pfm.load()
        locks["libpfm"] = lambda: libpfm._lock
    try:
        assert locked_in_child(locks) == dict.fromkeys(locks, False)
    finally:
        file_exporter.shutdown()


def test_a_dead_owners_repair_is_forgotten() -> None:
    before = len(forking._repairs)
    for _ in range(200):
        RateLimited(1.0)  # registers a lock renewal, then dies
    RateLimited(1.0)
    assert len(forking._repairs) <= before + 1


def test_a_repair_that_raises_does_not_stop_the_others() -> None:
    class Owner:
        pass

    def fail(owner: Owner) -> None:
        raise RuntimeError("broken repair")

    broken = Owner()
    forking.after_fork_in_child(broken, fail)
    limiter = RateLimited(1.0)  # its repair comes after the broken one
    assert locked_in_child({"RateLimited": lambda: limiter._lock}) == {"RateLimited": False}


class HeldExporter(InMemorySpanExporter):
    """An export that waits until released: one in flight at the fork."""

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.release = threading.Event(), threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.inside.set()
        self.release.wait(30)
        return super().export(spans)


def test_a_parents_export_in_flight_is_not_the_childs_to_lose() -> None:
    """The child's counts start at zero: the parent's export in flight at the fork is not
    counted lost by the child's shutdown (the parent sends it)."""
    held = HeldExporter()
    exporter = CountingSpanExporter(held, Endpoint("http://localhost:4318"))
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("s") as span:
        pass
    exporting = threading.Thread(target=exporter.export, args=([span] * 7,))
    exporting.start()
    assert held.inside.wait(30)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, json.dumps([exporter.abandon_in_flight(), exporter.sent]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    held.release.set()
    exporting.join()
    with os.fdopen(read_end) as pipe:
        assert json.loads(pipe.read()) == [0, 0]
    os.waitpid(pid, 0)
    assert exporter.sent == 7


def test_a_parents_runs_in_flight_do_not_hold_back_a_childs_profiled_run(
    tmp_path: Path, mlp_path: Path
) -> None:
    """A pre-forking server may fork while runs of a session are in flight on other threads:
    those runs never end in the child, whose first profiled run of the session must neither
    wait for them nor be skipped (``session_busy``)."""
    telemetry = Telemetry()
    feeds = {"x": np.ones((2, 32), np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # no pool threads: they would not exist in the child
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path), perf_events=False):
        session = ort.InferenceSession(mlp_path, options, providers=["CPUExecutionProvider"])
        waiting, go = held_runs(session)
        held = threading.Thread(target=session.run, args=(None, feeds))
        held.start()
        read_end, write_end = os.pipe()
        try:
            assert waiting.wait(30)
            pid = os.fork()
            if pid == 0:  # the child: exits, never returns into pytest
                try:
                    session._sess = session._sess._sess  # the child's runs go straight to ORT
                    started = time.monotonic()
                    with profile_next_run():
                        session.run(None, feeds)
                    took = time.monotonic() - started
                    flushed = flush_profiles(timeout=30)
                    run = attrs(telemetry.spans(semconv.SPAN_RUN)[-1])
                    said = [took, flushed, run[semconv.RUN_PROFILED],
                            run.get(semconv.PROFILE_SKIP_REASON)]  # fmt: skip
                    os.write(write_end, json.dumps(said).encode())
                finally:
                    os._exit(0)
        finally:
            go.set()
            held.join()
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            ready, _, _ = select.select([pipe], [], [], 60)
            found = json.loads(pipe.read() or "null") if ready else None
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert found is not None, "the child did not answer"
    took, flushed, profiled, reason = found
    assert (flushed, profiled, reason) == (True, True, None)
    assert took < 2, f"the child's profiled run took {took:.1f} s"

"""Locks a parent's thread holds at a fork (gunicorn's pre-forked workers) are free in the child."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import failures, forking, session_facts
from otel_ort.capi import library
from otel_ort.export import OtlpJsonFileSpanExporter
from otel_ort.perf import pfm
from otel_ort.pipeline import CountingSpanExporter, Endpoint
from otel_ort.profiling import recorded_options
from otel_ort.sampling import RateLimited


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
    api = library.load_api()
    limiter = RateLimited(1.0)
    locks: dict[str, Callable[[], threading.Lock]] = {
        "failures": lambda: failures._lock,
        "session facts": lambda: session_facts._collect_lock,
        "recorded options": lambda: recorded_options._recorded_lock,
        "C API table": lambda: library._apis_lock,
        "C API": lambda: api._lock,
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

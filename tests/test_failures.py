"""otel-ort's own failures: one traceback, then counted and summarised at most once a minute."""

from __future__ import annotations

import logging

import pytest

from otel_ort import failures


def fail(what: str) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failures.report_failure(what)


def test_first_failure_logged_in_full_then_counted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("otel_ort.failures.time.monotonic", lambda: clock[0])
    caplog.set_level(logging.ERROR, logger="otel_ort")
    for _ in range(100):
        fail("test kind A")
    clock[0] += 61
    fail("test kind A")
    records = [r for r in caplog.records if "test kind A" in r.getMessage()]
    assert [r.exc_info is not None for r in records] == [True, False]
    assert records[0].getMessage() == "otel-ort: test kind A; the run is unaffected"
    assert "again (100 times since the last report)" in records[1].getMessage()
    assert failures.failure_counts()["test kind A"] == 101

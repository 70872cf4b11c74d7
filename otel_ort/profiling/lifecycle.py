"""The profiling engine's end: ``flush`` (pending conversions, then the tracer provider),
``stop`` (once, at ``uninstrument()`` or the interpreter's exit: the worker drained and
stopped, spans flushed, perf closed, within a timeout), and the exit hook that runs it before
every ``atexit`` handler."""

from __future__ import annotations

import atexit
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from otel_ort._util.bounded import Outcome, call_within, seconds_left
from otel_ort.export.delivery import flushes
from otel_ort.failures import report_failure
from otel_ort.profiling.session_perf import SessionPerf
from otel_ort.profiling.worker import Worker

_logger = logging.getLogger("otel_ort")

SHUTDOWN_TIMEOUT_S = 30.0


class _ShutsDown(Protocol):
    def shutdown(self) -> None: ...


def flush_provider(provider: Any, deadline: float | None) -> Outcome:
    """Flush the tracer ``provider``'s span processors together, waiting for them until
    ``deadline`` (``time.monotonic()``; ``None``: no limit). (The SDK's flush exports
    every queued span whatever ``timeout_millis`` says; one still running at the deadline
    goes on in the background.)"""
    timeout = None if deadline is None else seconds_left(deadline)
    calls = [
        partial(flush, timeout_millis=int(timeout * 1000))
        if timeout is not None and _takes(flush, "timeout_millis")
        else flush
        for flush in flushes(provider)
    ]
    return call_within(calls, timeout, "a span processor's force_flush", "otel-ort-flush")


def flush(worker: Worker, provider: Callable[[], Any], timeout: float | None) -> bool:
    """Wait for the ``worker``'s pending conversions, then flush the tracer provider (as
    ``provider()`` gives it now); ``False`` if that took more than ``timeout`` seconds or the
    provider's flush failed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = worker.drain(timeout)
    flushed = flush_provider(provider(), deadline)
    return done and flushed.finished and not flushed.failed


def stop(
    worker: Worker, provider: Callable[[], Any], session_perf: SessionPerf, timeout: float
) -> None:
    """Convert what is pending, flush spans, close perf counters, stop the ``worker``'s
    thread: within ``timeout`` in all; what did not finish is logged."""
    deadline = time.monotonic() + timeout
    if not worker.stop(timeout):
        _logger.warning(
            "otel-ort: %d profiled run(s) were still waiting for the worker at shutdown "
            "after %g s: their spans are sent only if it finishes them before the "
            "process ends",
            worker.unfinished,
            timeout,
        )
    if not flush_provider(provider(), deadline).finished:  # a failure is the provider's to say
        _logger.warning(
            "otel-ort: the tracer provider's flush had not finished at shutdown after %g "
            "s; the spans it was still exporting are left to the provider's own shutdown",
            timeout,
        )
    session_perf.close()


def shut_down_at_exit(owner: _ShutsDown) -> None:
    """Call ``owner.shutdown()`` at the interpreter's exit, if ``owner`` is still alive then
    (not kept alive for it)."""
    reference = weakref.ref(owner)
    _before_atexit_handlers(lambda: _shut_down(reference))


def _takes(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``parameter``."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to read: try it
        return True
    return parameter in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _before_atexit_handlers(function: Callable[[], None]) -> None:
    """Call ``function`` at interpreter exit, before every ``atexit`` handler: threading's own
    exit hook (``concurrent.futures`` uses it too) runs once the main thread is done, while
    tracer providers are still up, whenever they registered their shutdown."""
    try:
        threading._register_atexit(function)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # not in this Python; or already exiting
        atexit.register(function)


def _shut_down(reference: Callable[[], _ShutsDown | None]) -> None:
    owner = reference()
    if owner is not None:
        try:  # an exception here would skip the joining of the user's non-daemon threads
            owner.shutdown()
        except Exception:
            report_failure("could not shut profiling down at exit")

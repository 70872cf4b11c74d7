"""Calls that must return within a time limit though what they call does not take one (the
SDK's ``force_flush`` exports every queued span, however long the collector takes)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

_logger = logging.getLogger("otel_ort")


def seconds_left(deadline: float) -> float:
    """Seconds until ``deadline`` (``time.monotonic()``), at least 0."""
    return max(0.0, deadline - time.monotonic())


class Outcome(NamedTuple):
    """How calls made by :func:`call_within` ended."""

    finished: bool
    """All returned in time."""
    failed: int
    """How many returned ``False`` or raised (by the time the wait ended)."""


def call_within(
    calls: Sequence[Callable[[], object]], timeout: float | None, what: str, name: str
) -> Outcome:
    """Start ``calls`` together, each in a daemon thread, and wait for them up to ``timeout``
    seconds (``None``: as long as they take). One still running goes on in the background
    (a daemon thread, ``name``d, does not hold the interpreter's exit). An exception is
    logged, naming ``what``. Where no thread can be started (Python 3.12.0-3.12.2 at
    interpreter exit), each runs here in turn, with no time limit."""
    failed: list[Callable[[], object]] = []

    def guarded(call: Callable[[], object]) -> None:
        try:
            if call() is False:
                failed.append(call)
        except Exception as exc:
            failed.append(call)
            _logger.warning("otel-ort: %s raised %r", what, exc)

    threads = []
    for call in calls:
        thread = threading.Thread(target=guarded, args=(call,), name=name)
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            guarded(call)
            continue
        threads.append(thread)
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if deadline is None else seconds_left(deadline))
    return Outcome(not any(thread.is_alive() for thread in threads), len(failed))

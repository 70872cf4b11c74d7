"""otel-ort's own failures: logged with a traceback the first time, then counted, never raised.

A broken telemetry pipeline or a buggy hook fails on every run; logging each one would flood
the user's logs from the hot path. Each kind of failure is logged in full once, then at most
once a minute with the number seen since.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from otel_ort._util.forking import renew_locks_in_child

_logger = logging.getLogger("otel_ort")

_INTERVAL_S = 60.0


class _Kind:
    __slots__ = ("count", "last_logged", "unlogged")

    def __init__(self) -> None:
        self.count = 0
        self.unlogged = 0
        self.last_logged = -_INTERVAL_S


_kinds: dict[str, _Kind] = {}
_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_lock")


def report_failure(what: str, traceback_text: str | None = None) -> None:
    """Call from an ``except`` block: ``what`` names the failure (``"request_hook raised"``).
    ``traceback_text``: the traceback, when it was raised elsewhere (the conversion
    process), instead of the one being handled."""
    now = time.monotonic()
    with _lock:
        kind = _kinds.setdefault(what, _Kind())
        kind.count += 1
        if now - kind.last_logged < _INTERVAL_S:
            kind.unlogged += 1
            return
        unlogged, kind.unlogged, kind.last_logged = kind.unlogged, 0, now
        first = kind.count == 1
    if first and traceback_text is not None:
        _logger.error("otel-ort: %s; the run is unaffected\n%s", what, traceback_text.rstrip())
    elif first:
        _logger.exception("otel-ort: %s; the run is unaffected", what)
    else:
        _logger.error(
            "otel-ort: %s again (%d times since the last report); the run is unaffected",
            what,
            unlogged + 1,
        )


def failure_counts() -> dict[str, int]:
    """How many times each kind of failure happened in this process."""
    with _lock:
        return {what: kind.count for what, kind in _kinds.items()}

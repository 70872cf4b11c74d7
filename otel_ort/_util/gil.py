"""Letting request threads have the GIL during the worker's long Python loops."""

from __future__ import annotations

import time

NODES_BETWEEN_PAUSES = 32
"""Span building: about 0.3 ms of work per pause on a 2-vCPU VM (2026-11-27)."""
EVENTS_BETWEEN_PAUSES = 256
"""Profile reading: about 0.3 ms of work per pause."""


def let_others_run() -> None:
    """Release the GIL for a moment. A thread that wants it takes it now, instead of waiting
    for the interpreter's switch interval (5 ms by default), which is how long it waits for a
    thread that never blocks. A probe thread sleeping 1 ms in a loop while the recogniser's
    profile was converted woke late 36 % of the time with these pauses, against 54 and 60 %
    without (``python -m bench.profiled_run_cost --quick``, 2026-11-27)."""
    time.sleep(0)

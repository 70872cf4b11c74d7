"""Hand the GIL over sooner while a background thread runs a long stretch of Python.

CPython lets a thread that holds the GIL keep it until another thread has waited for it for
the switch interval (``sys.getswitchinterval()``, 5 ms by default). A profile's conversion
is milliseconds of Python on the worker thread: a request thread that needs the GIL meanwhile
(to parse a request, or to return from ORT's run) waits up to that long each time. During
the conversion the interval is lowered to ``SHORT_S``, so such a thread waits at most that,
and the worker gets the GIL back as soon, rather than pausing the conversion for a whole
interval (measured 2026-11-27, ``docs/decisions.md``).

The interval is the interpreter's, not the thread's: it is lowered for the process while the
block runs, and put back afterwards unless somebody else changed it meanwhile (then theirs
stays). An interval already shorter is left as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

SHORT_S = 0.0005
"""The switch interval during the block: a tenth of CPython's default."""


@contextmanager
def short_switch_interval() -> Iterator[None]:
    """Lower the switch interval to ``SHORT_S`` inside the block (see the module's text)."""
    before = sys.getswitchinterval()
    if before <= SHORT_S:
        yield
        return
    sys.setswitchinterval(SHORT_S)
    ours = sys.getswitchinterval()  # as the interpreter holds it (whole microseconds)
    try:
        yield
    finally:
        if sys.getswitchinterval() == ours:
            sys.setswitchinterval(before)

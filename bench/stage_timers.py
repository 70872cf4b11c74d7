"""CPU time spent inside named functions, per thread role, for benches that split a cost.

``with StageTimers(HOOKS) as timers:`` wraps each hooked function (a module function or a
class's method, named by module and qualified name) so that the calling thread's CPU time
inside it is added to its label and the thread's name. Times are exclusive: a hooked
function called inside another is not counted twice. Hooks whose function no longer exists
are listed in ``missing`` (the bench says so) rather than failing: the code they time is
being reworked.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hook:
    """A function to time: ``module`` and ``name`` (``func`` or ``Class.method``)."""

    label: str
    module: str
    name: str


class StageTimers:
    """Thread CPU nanoseconds per (hook label, thread name) while the ``with`` block lasts."""

    def __init__(self, hooks: Sequence[Hook]) -> None:
        self._hooks = hooks
        self._saved: list[tuple[object, str, object | None]] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._ns: dict[tuple[str, str], int] = defaultdict(int)
        self.missing: list[Hook] = []
        """Hooks whose function was not found."""

    def __enter__(self) -> StageTimers:
        for hook in self._hooks:
            owner, attribute = _resolve(hook)
            original = getattr(owner, attribute, None) if owner is not None else None
            if not callable(original):
                self.missing.append(hook)
                continue
            own = attribute in vars(owner)  # not inherited: put back on exit, else removed
            self._saved.append((owner, attribute, original if own else None))
            setattr(owner, attribute, self._timed(hook.label, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attribute, original in reversed(self._saved):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
        self._saved.clear()

    def take(self) -> dict[tuple[str, str], int]:
        """The nanoseconds per (label, thread name) since the last ``take``; starts again
        from zero."""
        with self._lock:
            taken, self._ns = dict(self._ns), defaultdict(int)
        return taken

    def _add(self, label: str, ns: int) -> None:
        key = (label, threading.current_thread().name)
        with self._lock:
            self._ns[key] += ns

    def _timed(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack: list[list[Any]] = self._local.__dict__.setdefault("stack", [])
            now = time.thread_time_ns()
            if stack:  # the enclosing stage pauses
                self._add(stack[-1][0], now - stack[-1][1])
            stack.append([label, now])
            try:
                return function(*args, **kwargs)
            finally:
                end = time.thread_time_ns()
                self._add(label, end - stack.pop()[1])
                if stack:
                    stack[-1][1] = end

        return timed


def _resolve(hook: Hook) -> tuple[object | None, str]:
    """The object holding the hooked attribute, and the attribute's name."""
    try:
        owner: object = importlib.import_module(hook.module)
    except ImportError:
        return None, hook.name
    *path, attribute = hook.name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, attribute
    return owner, attribute

"""A selected run made profiled: the user's own call, on the user's own session, given a
``RunOptions`` of otel-ort's that carries ORT's run-level profiling.

The caller's ``RunOptions`` is never changed (one object is often shared by many threads'
runs): a new one is made with everything known of it (its properties, and the config
entries and LoRA adapters recorded since ``instrument()``), and ``terminate`` set on the
caller's object later reaches the copy too (``recorded_options.following_terminate``).
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from otel_ort.perf.counting import Counting, PerfCounters, Pool, RawRun
from otel_ort.profiling.recorded_options import created_while_recording, recorded_calls
from otel_ort.profiling.session_runs import SessionRuns, Window
from otel_ort.profiling.store import RunFiles

RUN_OPTIONS_PARAMETER: dict[str, int] = {
    "run": 2,
    "run_with_ort_values": 2,
    "run_with_ortvaluevector": 0,
    "run_with_iobinding": 1,
    "run_async": 4,
}
"""Run method → the position of its ``run_options`` parameter."""
_REPLAYED = ("add_run_config_entry", "add_active_adapter")


class RunOptionsUnknown(Exception):
    """The caller's ``RunOptions`` cannot be copied whole; the message says why."""


def caller_run_options(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``run_options`` the caller passed (``None`` if none)."""
    index = RUN_OPTIONS_PARAMETER[method]
    return args[index] if len(args) > index else kwargs.get("run_options")


def with_run_options(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any], options: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with ``options`` as its ``run_options``."""
    index = RUN_OPTIONS_PARAMETER[method]
    if len(args) > index:
        return (*args[:index], options, *args[index + 1 :]), kwargs
    return args, {**kwargs, "run_options": options}


def copy_run_options(run_options_class: type, caller: Any) -> Any:
    """A new ``RunOptions`` like ``caller``; ``RunOptionsUnknown`` if ``caller`` was made
    before ``instrument()`` (its config entries cannot be listed)."""
    calls = recorded_calls(caller)
    if not created_while_recording(calls):
        raise RunOptionsUnknown(
            "its RunOptions was created before instrument(), so its config entries and "
            "adapters cannot be known; create RunOptions after instrument() to profile it"
        )
    options = run_options_class()
    for name, value in vars(run_options_class).items():
        if isinstance(value, property) and value.fset is not None:
            setattr(options, name, getattr(caller, name))
    for method, arguments in calls:
        if method in _REPLAYED:
            getattr(options, method)(*arguments)
    return options


@dataclass(slots=True)
class ProfiledRun:
    """What the worker needs of a profiled run (not its outputs: they are the caller's)."""

    files: RunFiles
    start_ns: int
    thread: tuple[int, str]
    """OS thread id and name of the thread that called ORT."""
    counters: RawRun | str | None = None
    """What perf counted, or why nothing was (``None``: perf counters are off)."""
    overlapping: int = 0
    """Other runs of the session in flight meanwhile."""


class ProfiledCall:
    """A selected run, ready to go: its files, its ``RunOptions``, the session's gate passed
    (``window``). ``begin`` and ``end`` bracket ORT's run; every path ends in ``end`` or
    ``abandon``."""

    def __init__(
        self,
        runs: SessionRuns,
        window: Window,
        files: RunFiles,
        arguments: tuple[tuple[Any, ...], dict[str, Any]],
        terminate: AbstractContextManager[Any] | None,
        perf: tuple[PerfCounters, Pool, bool] | str | None,
    ) -> None:
        self.runs = runs
        self.window = window
        self.files = files
        self.args, self.kwargs = arguments
        self._terminate = terminate
        """Follows the caller's ``terminate`` (``None``: the caller gave no ``RunOptions``)."""
        self._perf = perf
        """(counters, the session's pool, sequential execution), or why not counted."""
        self._counting: Counting | str | None = None
        self._start_ns = 0
        self._following = False
        self._ended = False

    def begin(self) -> None:
        """Just before ORT's run: follow the caller's ``terminate``, start perf, read the
        clock (ORT's profile starts at ``ts`` 0 then)."""
        if self._terminate is not None:
            self._terminate.__enter__()
            self._following = True
        perf = self._perf
        if isinstance(perf, tuple):
            counters, pool, _ = perf
            self._counting = counters.begin(pool)
        else:
            self._counting = perf
        self._start_ns = time.time_ns()

    def end(self) -> ProfiledRun:
        """Just after ORT's run (on the thread that called it, or ORT's callback's)."""
        counters = self._stop()
        overlapping = self.runs.end_profiled(self.window)
        self._ended = True
        return ProfiledRun(
            self.files,
            self._start_ns,
            (threading.get_native_id(), threading.current_thread().name),
            counters,
            overlapping,
        )

    def abandon(self) -> None:
        """ORT's run raised, or never started: what it counted is dropped (nothing, if the
        run has ended already)."""
        if not self._ended:
            self._ended = True
            self._stop()
            self.runs.end_profiled(self.window, completed=False)

    def _stop(self) -> RawRun | str | None:
        counting, self._counting = self._counting, None
        try:
            if isinstance(counting, Counting) and isinstance(self._perf, tuple):
                counters, _, sequential = self._perf
                return counters.end(counting, caller_runs_nodes=sequential)
            return None if isinstance(counting, Counting) else counting
        finally:
            if self._following and self._terminate is not None:
                self._following = False
                self._terminate.__exit__(None, None, None)

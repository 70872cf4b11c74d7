"""``otel-ort profile``'s runs: the warm-up, then the profiled runs, each with its own
``RunOptions`` and file prefix and counted by perf, with progress on stderr; Ctrl-C keeps the
runs done."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

from otel_ort.cli.profile_perf import CommandPerf
from otel_ort.cli.profile_session import CommandSession, ModelFailed, UserError
from otel_ort.cli.tables import plural
from otel_ort.perf.counting import RawRun
from otel_ort.profiling.store import ProfileStore, RunFiles, remove_files


@dataclass(frozen=True)
class CommandRun:
    """A profiled run of ``otel-ort profile``: ORT's files, its profile's time base and what
    perf counted (the engine's counterpart is ``profiled_call.ProfiledRun``)."""

    files: RunFiles
    start_ns: int
    counted: RawRun | str | None
    """What perf counted, why nothing (or ``None``: perf is off)."""


def warm_up(
    session: CommandSession, feeds: dict[str, Any], runs: int, store: ProfileStore, err: TextIO
) -> None:
    """The unprofiled warm-up runs, then a profiled run whose profile ORT cannot write (its
    prefix is in a directory that does not exist): ORT starts its profiler on a session's
    first one (about a millisecond), which is no run's time."""
    progress = Progress(runs, err, "warm-up")
    for done in range(1, runs + 1):
        session.run(feeds)
        progress.update(done)
    session.run(feeds, session.options(store.void_prefix()))


def profiled_runs(
    session: CommandSession,
    feeds: dict[str, Any],
    count: int,
    store: ProfileStore,
    perf: CommandPerf,
    err: TextIO,
) -> tuple[list[CommandRun], bool]:
    """``count`` profiled runs, each with its own RunOptions and file prefix, counted; each
    profile's time base is read just before the run is called (ORT's starts once it has
    checked the inputs); and whether Ctrl-C cut them short (then the runs done are returned:
    those kept are shown, the exit status is 130)."""
    runs: list[CommandRun] = []
    progress = Progress(count, err, "profiled")
    files: RunFiles | None = None
    try:
        for done in range(1, count + 1):
            files = store.new_run()
            options = session.options(files.prefix)
            started = perf.begin()
            start_ns = time.time_ns()
            try:
                session.run(feeds, options)
            finally:
                counted = perf.end(started)
                runs.append(CommandRun(files, start_ns, counted))
            progress.update(done)
    except KeyboardInterrupt:  # Ctrl-C: the runs done so far are kept and shown
        if files is not None:
            remove_files(store.written(files))
        if runs and runs[-1].files == files:
            runs.pop()  # the one in flight (it may have ended in the middle)
        if not runs:
            raise
        print(f"\ninterrupted: keeping the {plural(len(runs), 'run')} done", file=err)
        return runs, True
    except (ModelFailed, UserError):
        if files is not None:  # (a run whose profiling was not switched on is not in runs)
            remove_files(store.written(files))
        for run in runs:
            remove_files(store.written(run.files))
        raise
    return runs, False


class Progress:
    """``profiled [#####.....] 5/10`` redrawn on a terminal; elsewhere a line about every
    tenth."""

    _WIDTH = 20

    def __init__(self, total: int, stream: TextIO, verb: str) -> None:
        self._total = total
        self._stream = stream
        self._verb = verb
        self._tty = stream.isatty()
        self._tenths = 0

    def update(self, done: int) -> None:
        """``done`` of the total are done."""
        if self._tty:
            filled = self._WIDTH * done // self._total
            bar = "#" * filled + "." * (self._WIDTH - filled)
            end = "\n" if done == self._total else ""
            line = f"\r{self._verb:>8} [{bar}] {done}/{self._total}"
            print(line, end=end, file=self._stream, flush=True)
        elif done * 10 // self._total > self._tenths:
            self._tenths = done * 10 // self._total
            print(f"{self._verb} {done}/{self._total} runs", file=self._stream, flush=True)

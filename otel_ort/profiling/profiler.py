"""The profiling engine's facade: runs selected by the sampler are profiled by ORT itself, on
the user's own session; a background worker turns each profile into spans and a kept file.

Request thread: :mod:`~otel_ort.profiling.selection` says which runs; ``prepare`` makes a
``ProfiledCall`` — the caller's own call given a ``RunOptions`` of otel-ort's carrying
run-level profiling (``run_options``), a fresh file prefix, a place in the worker's queue,
the session's gate passed (``session_runs``) — or gives a skip reason
(:mod:`~otel_ort.profiling.prerequisites`, :mod:`~otel_ort.profiling.session_checks`), and
the caller runs ORT as usual. Profiling never changes what a run returns or raises: it is
ORT's own run.

Worker (``finish`` → ``conversion``): read the profile, hang node and kernel spans under the
run span, end the run span (at the time the run ended), write the enriched Chrome JSON,
apply retention. What becomes of each selected run is counted (:mod:`~otel_ort.profiling.tally`).

Lifecycle (:mod:`~otel_ort.profiling.lifecycle`): ``shutdown`` (``uninstrument()`` and
interpreter exit) converts what is pending, flushes the provider and closes perf counters
(:mod:`~otel_ort.profiling.session_perf`); a forked child gets a fresh worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onnxruntime import RunOptions
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from otel_ort import semconv
from otel_ort._util.forking import after_fork_in_child
from otel_ort.instrumentation.metrics import Instruments
from otel_ort.instrumentation.options import ProfilingOptions
from otel_ort.profiling import lifecycle
from otel_ort.profiling.conversion import Converter, end_span
from otel_ort.profiling.conversion_process import ConversionProcess
from otel_ort.profiling.pool_log import PoolLogs
from otel_ort.profiling.prerequisites import SHUT_DOWN, Prerequisites
from otel_ort.profiling.profiled_call import (
    ProfiledCall,
    ProfiledRun,
    RunOptionsUnknown,
    caller_run_options,
    copy_run_options,
    with_run_options,
)
from otel_ort.profiling.ready_options import Ready, ReadyOptions
from otel_ort.profiling.recorded_options import following_terminate
from otel_ort.profiling.run_options import LayoutChanged, RunProfilingSwitch, Unrecognized
from otel_ort.profiling.selection import RunChooser
from otel_ort.profiling.session_checks import Skipped, caller_refusal, fixed_for
from otel_ort.profiling.session_perf import SessionPerf
from otel_ort.profiling.session_runs import BUSY_BACKOFF_S, GATE_TIMEOUT_S, SessionRuns
from otel_ort.profiling.store import ProfileStore, RunFiles, remove_files
from otel_ort.profiling.tally import Tally
from otel_ort.profiling.worker import Worker


@dataclass(slots=True)  # not frozen: made on the request thread (a frozen one's __init__ is slower)
class _Checked:
    """What a selected run needs before its files and gate."""

    switch: RunProfilingSwitch
    store: ProfileStore
    sequential: bool
    """The session executes its nodes one after the other, on the calling thread."""
    caller: Any
    """The caller's ``RunOptions`` (``None``: none)."""
    options: Any
    """A copy of the caller's, to switch to profile (``None``: the caller has none)."""


class Profiler:
    """Selects, profiles and converts runs for one ``instrument()``; its metrics go to
    ``instruments`` (made by ``instrument()``)."""

    def __init__(
        self,
        options: ProfilingOptions,
        instruments: Instruments,
        tracer_provider: Any = None,
    ) -> None:
        chooser = RunChooser(options.sampler)
        self.sampler = chooser.sampler
        self.asks_sampler = chooser.asks_sampler
        """``False`` with the default ``Never``: the run wrapper asks :meth:`selects` only
        when a forced run may be pending (see ``RunChooser.asks_sampler``)."""
        self.selects: Callable[[Span, Context], bool] = chooser.selects
        """Whether this run is to be profiled: forced (in the caller's ``current`` context),
        or chosen by the sampler (``RunChooser.selects``, bound: no call of the facade's own
        on the request path)."""
        self._tracer_provider = tracer_provider
        self._prerequisites = Prerequisites(options)
        self.worker = Worker("otel-ort-profiler")
        self._session_perf = SessionPerf(options.perf)
        self._ready = ReadyOptions()
        self.pool_logs: PoolLogs | None = None
        """Clears the thread-pool profiler log of threads running profiled sessions."""
        self._tally = Tally(instruments)
        self._converter = Converter(
            self._session_perf.perf,
            self._provider,
            self._tally.converted,
            options.max_trace_bytes,
            ConversionProcess() if options.conversion == "process" else None,
        )
        lifecycle.shut_down_at_exit(self)
        after_fork_in_child(self, Profiler._after_fork_in_child)

    # -- request thread -------------------------------------------------------------------

    def prepare(
        self, session: Any, runs: SessionRuns, method: str, args: Any, kwargs: Any
    ) -> ProfiledCall | Skipped:
        """The selected call made profiled, ready to run (the session's gate passed); or why
        not (the caller then runs ORT as usual)."""
        checked = self._check(session, method, args, kwargs)
        if isinstance(checked, Skipped):
            return checked
        asynchronous = method == "run_async"
        if not asynchronous and not self.worker.reserve():  # so that no profile is lost
            return self._no_room(f"{self.worker.pending} profiles wait for conversion")
        files: RunFiles | None = None
        try:
            ready = self._switched_on(checked, asynchronous)
            if isinstance(ready, Skipped):
                return ready
            options, files = ready.options, ready.files
            perf = self._session_perf.for_run(session, checked.sequential, asynchronous)
            window = runs.begin_profiled()
        except BaseException:  # KeyboardInterrupt at the gate, say: the place goes back
            self._unprepare(files, asynchronous)
            raise
        if window is None:
            self._unprepare(files, asynchronous)
            return Skipped(
                semconv.SKIP_SESSION_BUSY,
                "the session's first profiled run waited over "
                f"{GATE_TIMEOUT_S:g} s for its runs in flight (now, or within the last "
                f"{BUSY_BACKOFF_S:g} s)",
            )
        return ProfiledCall(
            runs,
            window,
            files,
            with_run_options(method, args, kwargs, options),
            following_terminate(checked.caller, options),
            perf,
        )

    def _check(self, session: Any, method: str, args: Any, kwargs: Any) -> _Checked | Skipped:
        """What a profiled run needs (the switch, the store, how the session runs, the
        caller's ``RunOptions``), or why it cannot be had."""
        prerequisites = self._prerequisites
        found = prerequisites.found
        if found is not None:
            switch, store = found
        else:
            unavailable = prerequisites.unavailable()
            ready_switch = prerequisites.ready_switch() if not unavailable else None
            if isinstance(ready_switch, Unrecognized):
                return Skipped(semconv.SKIP_LAYOUT, ready_switch.reason)
            ready_store = prerequisites.ready_store() if ready_switch is not None else unavailable
            if isinstance(ready_store, str) or ready_switch is None:
                return Skipped(semconv.SKIP_UNAVAILABLE, str(ready_store))
            switch, store = ready_switch, ready_store
            prerequisites.note_found(switch, store)
        caller = caller_run_options(method, args, kwargs)
        refusal = caller_refusal(method, caller)
        if refusal is not None:
            return refusal
        if self.pool_logs is None:  # now that the store's directory is known
            self.pool_logs = PoolLogs(switch, store.void_prefix())
        fixed = fixed_for(session)
        if fixed.refusal is not None:
            return fixed.refusal
        try:
            options = None if caller is None else copy_run_options(RunOptions, caller)
        except RunOptionsUnknown as exc:
            return Skipped(semconv.SKIP_RUN_OPTIONS, str(exc))
        return _Checked(switch, store, fixed.sequential, caller, options)

    def _switched_on(self, checked: _Checked, asynchronous: bool) -> Ready | Skipped:
        """The run's ``RunOptions``, switched to profile into its files: the one made ahead
        when the caller has none, else a copy of the caller's, switched now."""
        options = checked.options
        if options is None:
            ready = self._ready.take()
            if ready is not None:
                return ready
            options = RunOptions()
        files = checked.store.new_run()
        try:
            checked.switch.enable(options, files.prefix)
        except LayoutChanged as exc:
            self._unprepare(files, asynchronous)
            return Skipped(semconv.SKIP_LAYOUT, str(exc))
        return Ready(options, files)

    def record_skip(self, span: Span, skipped: Skipped) -> None:
        """Mark a selected run that was not profiled, on its span and in the counts."""
        self._tally.skipped(span, skipped)

    def failed(self, call: ProfiledCall, asynchronous: bool = False) -> None:
        """ORT raised on a profiled run (as it would have anyway): drop what it left."""
        call.abandon()
        self._unprepare(call.files, asynchronous)
        self._tally.run(semconv.RUN_FAILED_OUTCOME)

    def _unprepare(self, files: RunFiles | None, asynchronous: bool) -> None:
        """Give back a prepared run's place (and delete what ORT may have written)."""
        if not asynchronous:
            self.worker.release()
        if files is not None:
            self._discard(files)

    def _no_room(self, detail: str) -> Skipped:
        """Why the worker refused a place: shut down meanwhile, or a full queue."""
        if self._prerequisites.shut_down:
            return Skipped(semconv.SKIP_UNAVAILABLE, SHUT_DOWN)
        return Skipped(semconv.SKIP_BACKLOG, detail)

    def finish(
        self,
        span: Span,
        end_ns: int,
        run: ProfiledRun,
        session_facts: Any,
        runs: SessionRuns,
        measured: Callable[[], None],
        asynchronous: bool = False,
    ) -> None:
        """Hand a profiled run to the worker (into the place ``prepare`` reserved; a
        ``run_async`` run asks for one now): it calls ``measured`` (the caller's marks on the
        span and its duration metric), converts the run and ends ``span`` at ``end_ns``."""
        store = self._prerequisites.store
        assert store is not None  # a profiled run had one

        def convert() -> None:
            measured()
            self._converter.convert(store, span, end_ns, run, session_facts, runs)
            self._make_ready(store)

        if not self.worker.submit(convert, reserved=not asynchronous):
            # its thread could not start (logged), or no room for a run_async's
            measured()
            self._tally.run("profiled")
            self._tally.run(semconv.PROFILE_ERROR_OUTCOME)
            self._discard(run.files)
            end_span(span, end_ns, f"not converted: {self._no_room('the queue was full').detail}")

    def _make_ready(self, store: ProfileStore) -> None:
        """Worker: the next run's ``RunOptions``, switched on ahead."""
        switch = self._prerequisites.switch
        if switch is not None and not isinstance(switch, Unrecognized):
            self._ready.make(store, switch)

    # -- housekeeping -----------------------------------------------------------------------

    def _discard(self, files: RunFiles) -> None:
        """Delete what ORT wrote for a run that is not kept (off the request thread)."""
        store = self._prerequisites.store
        if store is not None and not self.worker.submit(lambda: remove_files(store.written(files))):
            remove_files(store.written(files))

    def counts(self) -> dict[str, int]:
        """This process's totals: selected runs by outcome (``profiled``, ``run_failed`` or
        the skip reason), ``spans_dropped``, ``files_deleted``."""
        return self._tally.totals()

    def _provider(self) -> Any:
        """The tracer provider now (the global one may be set after ``instrument()``)."""
        return self._tracer_provider or trace.get_tracer_provider()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for pending conversions, then flush the tracer provider; ``False`` if that
        took more than ``timeout`` seconds or the provider's flush failed."""
        return lifecycle.flush(self.worker, self._provider, timeout)

    def shutdown(self, timeout: float = lifecycle.SHUTDOWN_TIMEOUT_S) -> None:
        """Convert what is pending, flush spans, close perf counters, stop the worker thread:
        within ``timeout`` in all. Once: ``uninstrument()`` or the interpreter's exit."""
        if self._prerequisites.shut():
            lifecycle.stop(self.worker, self._provider, self._session_perf, timeout)
            if not self.worker.unfinished:  # else a conversion may still need the process
                self._converter.close()

    def _after_fork_in_child(self) -> None:
        self.worker.reset_after_fork()
        self._prerequisites.after_fork_in_child()
        self._tally.after_fork_in_child()  # counts() are this process's
        self._session_perf.after_fork_in_child()
        self._ready.clear()

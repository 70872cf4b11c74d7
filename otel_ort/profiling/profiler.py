"""The profiling engine: runs selected by the sampler are profiled by ORT itself, on the
user's own session; a background worker turns each profile into spans and a kept file.

Request thread (``prepare``): a ``ProfiledCall`` — the caller's own call given a
``RunOptions`` of otel-ort's carrying run-level profiling (``run_options``), a fresh file
prefix, a place in the worker's queue, the session's gate passed (``session_runs``) — or a
skip reason, and the caller runs ORT as usual. Profiling never changes what a run returns
or raises: it is ORT's own run.

Worker (``finish`` → ``conversion``): read the profile, hang node and kernel spans under the
run span, end the run span (at the time the run ended), write the enriched Chrome JSON,
apply retention.

Lifecycle: ``shutdown`` (``uninstrument()`` and interpreter exit) converts what is pending,
flushes the provider and closes perf counters; a forked child gets a fresh worker.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from onnxruntime import ExecutionMode, RunOptions
from opentelemetry import trace
from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, get_meter
from opentelemetry.trace import Span

from otel_ort import semconv
from otel_ort._util.bounded import Outcome, call_within, seconds_left
from otel_ort._util.forking import after_fork_in_child
from otel_ort.export.delivery import flushes
from otel_ort.failures import report_failure
from otel_ort.instrumentation.options import ProfilingOptions
from otel_ort.perf.counting import PerfCounters, Pool
from otel_ort.profiling.conversion import MAX_DETAIL, Converter, end_span
from otel_ort.profiling.pool_log import PoolLogs
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
from otel_ort.profiling.run_options import (
    LayoutChanged,
    RunProfilingSwitch,
    Unrecognized,
    run_profiling_switch,
)
from otel_ort.profiling.session_runs import (
    BUSY_BACKOFF_S,
    GATE_TIMEOUT_S,
    SessionRuns,
    pool_threads,
)
from otel_ort.profiling.store import (
    ProfileDirError,
    ProfileStore,
    RunFiles,
    default_profile_dir,
    remove_files,
)
from otel_ort.profiling.worker import Worker
from otel_ort.sampling import PROFILE_BAGGAGE_KEY, Never, take_forced
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

_POOL_KEY = "_otel_ort_perf_pool"
_FIXED_KEY = "_otel_ort_profiling_facts"
_SHUT_DOWN = "otel-ort's profiling was shut down"
_SHUTDOWN_TIMEOUT_S = 30.0
_NOT_KNOWN_THREADS = (
    "the session was created before instrument(): its intra-op threads are not known, only "
    "the calling thread is counted"
)
_ASYNC_NOT_COUNTED = "run_async runs on ORT's own thread: its run is not counted"

Skipped = tuple[str, str]
"""(reason, detail): why a selected run was not profiled."""


@dataclass(frozen=True, slots=True)
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
    """Selects, profiles and converts runs for one ``instrument()``."""

    def __init__(
        self,
        options: ProfilingOptions,
        tracer_provider: Any = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.sampler = options.sampler
        self.asks_sampler = type(self.sampler) is not Never
        """``False`` with the default ``Never``: then only a forced run can be selected, and
        the run wrapper asks :meth:`selects` only when one may be (a ``profile_next_run``
        request pending, or baggage in the caller's context)."""
        self._options = options
        self._tracer_provider = tracer_provider
        self._store: ProfileStore | None = None
        self._unavailable = ""  # why profiling cannot work at all here, once known
        if options.directory is not None:  # checked by the options; the default: later
            self._store = ProfileStore(options.directory, options.max_files, options.max_bytes)
        self.worker = Worker("otel-ort-profiler")
        perf = options.perf
        self.perf = PerfCounters(perf.events, perf.period_ns, perf.explicit) if perf else None
        self._switch: RunProfilingSwitch | Unrecognized | None = None
        self._ready = ReadyOptions()
        self.pool_logs: PoolLogs | None = None
        """Clears the thread-pool profiler log of threads running profiled sessions."""
        self._prepare_lock = threading.Lock()
        self._lock = threading.Lock()
        self._shut_down = False
        self._pools: list[weakref.finalize[Any, Any]] = []
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        meter = get_meter("otel_ort", __version__, meter_provider)
        self._runs_counter = meter.create_counter(
            semconv.METRIC_PROFILE_RUNS, "{run}", "Runs selected for profiling, by outcome."
        )
        self._dropped_counter = meter.create_counter(
            semconv.METRIC_PROFILE_SPANS_DROPPED, "{span}", "Profile spans that were dropped."
        )
        self._deleted_counter = meter.create_counter(
            semconv.METRIC_PROFILE_FILES_DELETED, "{file}", "Profile files deleted by retention."
        )
        self._converter = Converter(
            self.perf, self._provider, self._converted, options.max_trace_bytes
        )
        reference = weakref.ref(self)
        _before_atexit_handlers(lambda: _shut_down(reference))
        after_fork_in_child(self, Profiler._after_fork_in_child)

    # -- request thread -------------------------------------------------------------------

    def selects(self, span: Span, current: Context) -> bool:
        """Whether this run is to be profiled: forced (in the caller's ``current`` context),
        or chosen by the sampler."""
        if take_forced():
            return True
        entries = current.get(_BAGGAGE_KEY)  # 3x cheaper than get_baggage
        if isinstance(entries, dict) and entries.get(PROFILE_BAGGAGE_KEY) == "1":
            return True
        return self.asks_sampler and self.sampler.should_profile(span.get_span_context())

    def prepare(
        self, session: Any, runs: SessionRuns, method: str, args: Any, kwargs: Any
    ) -> ProfiledCall | Skipped:
        """The selected call made profiled, ready to run (the session's gate passed); or why
        not (the caller then runs ORT as usual)."""
        checked = self._check(session, method, args, kwargs)
        if isinstance(checked, tuple):
            return checked
        asynchronous = method == "run_async"
        if not asynchronous and not self.worker.reserve():  # so that no profile is lost
            return self._no_room(f"{self.worker.pending} profiles wait for conversion")
        files: RunFiles | None = None
        try:
            ready = self._switched_on(checked, asynchronous)
            if isinstance(ready, tuple):
                return ready
            options, files = ready.options, ready.files
            perf = self._perf_for(session, checked.sequential, asynchronous)
            window = runs.begin_profiled()
        except BaseException:  # KeyboardInterrupt at the gate, say: the place goes back
            self._unprepare(files, asynchronous)
            raise
        if window is None:
            self._unprepare(files, asynchronous)
            return semconv.SKIP_SESSION_BUSY, (
                "the session's first profiled run waited over "
                f"{GATE_TIMEOUT_S:g} s for its runs in flight (now, or within the last "
                f"{BUSY_BACKOFF_S:g} s)"
            )
        return ProfiledCall(
            runs,
            window,
            files,
            with_run_options(method, args, kwargs, options),
            following_terminate(checked.caller, options),
            perf,
        )

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
            return semconv.SKIP_LAYOUT, str(exc)
        return Ready(options, files)

    def _check(self, session: Any, method: str, args: Any, kwargs: Any) -> _Checked | Skipped:
        """What a profiled run needs (the switch, the store, how the session runs, the
        caller's ``RunOptions``), or why it cannot be had."""
        unavailable = self._unavailable or (_SHUT_DOWN if self._shut_down else "")
        switch = self._ready_switch() if not unavailable else None
        if isinstance(switch, Unrecognized):
            return semconv.SKIP_LAYOUT, switch.reason
        store = self._ready_store() if switch is not None else unavailable
        if isinstance(store, str) or switch is None:
            return semconv.SKIP_UNAVAILABLE, str(store)
        caller = caller_run_options(method, args, kwargs)
        if not isinstance(caller, RunOptions) and (
            caller is not None or method == "run_with_ortvaluevector"
        ):  # ORT's own run refuses it
            given = "None" if caller is None else f"a {type(caller).__name__}"
            return semconv.SKIP_VALUE, f"run_options is {given}"
        if self.pool_logs is None:  # now that the store's directory is known
            self.pool_logs = PoolLogs(switch, store.void_prefix())
        fixed = _fixed(session)
        if fixed.refusal is not None:
            return fixed.refusal
        try:
            options = None if caller is None else copy_run_options(RunOptions, caller)
        except RunOptionsUnknown as exc:
            return semconv.SKIP_RUN_OPTIONS, str(exc)
        return _Checked(switch, store, fixed.sequential, caller, options)

    def failed(self, call: ProfiledCall, asynchronous: bool = False) -> None:
        """ORT raised on a profiled run (as it would have anyway): drop what it left."""
        call.abandon()
        self._unprepare(call.files, asynchronous)
        self._count_run(semconv.RUN_FAILED_OUTCOME)

    def _unprepare(self, files: RunFiles | None, asynchronous: bool) -> None:
        """Give back a prepared run's place (and delete what ORT may have written)."""
        if not asynchronous:
            self.worker.release()
        if files is not None:
            self._discard(files)

    def _ready_switch(self) -> RunProfilingSwitch | Unrecognized:
        """The run-profiling switch, found on the first selected run (again on a later one
        while the probe could not run)."""
        switch = self._switch
        if switch is None:
            with self._prepare_lock:
                switch = self._switch
                if switch is None:
                    switch = run_profiling_switch()
                    if isinstance(switch, Unrecognized) and switch.transient:
                        return switch
                    self._switch = switch
                    if isinstance(switch, Unrecognized):
                        _logger.warning(
                            "otel-ort: runs cannot be profiled: run-level profiling cannot be "
                            "set on this RunOptions (%s); please report it with your "
                            "onnxruntime version",
                            switch.reason,
                        )
        return switch

    def _ready_store(self) -> ProfileStore | str:
        """The profile store (the default one is made on the first profiled run), or why
        there is none."""
        if self._store is None:
            with self._lock:
                if self._store is None and not self._unavailable:
                    try:
                        self._store = ProfileStore(
                            default_profile_dir(),
                            self._options.max_files,
                            self._options.max_bytes,
                        )
                    except (ProfileDirError, OSError) as exc:
                        self._unavailable = (
                            f"profile_dir: {exc}" if isinstance(exc, ProfileDirError) else str(exc)
                        )
                        _logger.warning("otel-ort: runs cannot be profiled: %s", self._unavailable)
        return self._store or self._unavailable

    def _perf_for(
        self, session: Any, sequential: bool, asynchronous: bool
    ) -> tuple[PerfCounters, Pool, bool] | str | None:
        """What counts this run: perf, the session's pool, whether the calling thread runs
        the nodes (sequential execution); or why nothing does (``None``: perf is off)."""
        perf = self.perf
        if perf is None:
            return None
        try:  # probes once (again after a shortage of file descriptors or memory)
            if not perf.prepare():
                return perf.unavailable or "perf counters are not ready"
        except Exception as exc:
            report_failure("could not prepare perf counters")
            return f"perf counters could not be prepared: {exc!r}"
        if asynchronous:
            return _ASYNC_NOT_COUNTED
        entry = session.__dict__.get(_POOL_KEY)
        pool = entry[1] if entry is not None and entry[0] == os.getpid() else None
        if pool is None:
            try:
                pool = self._open_pool(session)
            except Exception as exc:
                report_failure("could not open perf counters on a session's threads")
                return f"perf counters could not be opened: {exc!r}"
        return perf, pool, sequential

    def _open_pool(self, session: Any) -> Pool:
        """perf groups on the session's intra-op threads (switched on around its profiled
        runs only: its unprofiled runs pay nothing), closed with the session."""
        assert self.perf is not None
        with self._lock:
            entry = session.__dict__.get(_POOL_KEY)
            if entry is not None and entry[0] == os.getpid():
                opened: Pool = entry[1]  # by another thread's profiled run, meanwhile
                return opened
            threads = pool_threads(session)
            pool = self.perf.pool(threads or ())
            if threads is None:
                pool.problems.append(_NOT_KNOWN_THREADS)
            session.__dict__[_POOL_KEY] = (os.getpid(), pool)
            self._pools = [*(f for f in self._pools if f.alive)]
            self._pools.append(weakref.finalize(session, pool.close))
        return pool

    def _no_room(self, detail: str) -> Skipped:
        """Why the worker refused a place: shut down meanwhile, or a full queue."""
        if self._shut_down:
            return semconv.SKIP_UNAVAILABLE, _SHUT_DOWN
        return semconv.SKIP_BACKLOG, detail

    def record_skip(self, span: Span, skipped: Skipped) -> None:
        """Mark a selected run that was not profiled, on its span and in the counts."""
        reason, detail = skipped
        if span.is_recording():
            span.set_attributes(
                {
                    semconv.PROFILE_SKIP_REASON: reason,
                    semconv.PROFILE_SKIP_DETAIL: detail[:MAX_DETAIL],
                }
            )
        self._count_run(reason)

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
        store = self._store
        assert store is not None  # a profiled run had one

        def convert() -> None:
            measured()
            self._converter.convert(store, span, end_ns, run, session_facts, runs)
            self._make_ready(store)

        if not self.worker.submit(convert, reserved=not asynchronous):
            # its thread could not start (logged), or no room for a run_async's
            measured()
            self._count_run("profiled")
            self._count_run(semconv.PROFILE_ERROR_OUTCOME)
            self._discard(run.files)
            end_span(span, end_ns, f"not converted: {self._no_room('the queue was full')[1]}")

    def _make_ready(self, store: ProfileStore) -> None:
        """Worker: the next run's ``RunOptions``, switched on ahead."""
        switch = self._switch
        if switch is not None and not isinstance(switch, Unrecognized):
            self._ready.make(store, switch)

    # -- housekeeping -----------------------------------------------------------------------

    def _discard(self, files: RunFiles) -> None:
        """Delete what ORT wrote for a run that is not kept (off the request thread)."""
        store = self._store
        if store is not None and not self.worker.submit(lambda: remove_files(store.written(files))):
            remove_files(store.written(files))

    def _converted(self, what: str, number: int) -> None:
        """The converter's counts: outcomes, and what it dropped or deleted."""
        if what == "spans_dropped":
            self._count(what, number)
            self._dropped_counter.add(number)
        elif what == "files_deleted":
            self._count(what, number)
            self._deleted_counter.add(number)
        else:
            self._count_run(what)

    def _count_run(self, outcome: str) -> None:
        self._count(outcome)
        self._runs_counter.add(1, {semconv.PROFILE_OUTCOME: outcome})

    def _count(self, what: str, number: int = 1) -> None:
        with self._counts_lock:
            self._counts[what] += number

    def counts(self) -> dict[str, int]:
        """This process's totals: selected runs by outcome (``profiled``, ``run_failed`` or
        the skip reason), ``spans_dropped``, ``files_deleted``."""
        with self._counts_lock:
            return dict(self._counts)

    def _provider(self) -> Any:
        """The tracer provider now (the global one may be set after ``instrument()``)."""
        return self._tracer_provider or trace.get_tracer_provider()

    def _flush_provider(self, deadline: float | None) -> Outcome:
        """Flush the tracer provider's span processors together, waiting for them until
        ``deadline`` (``time.monotonic()``; ``None``: no limit). (The SDK's flush exports
        every queued span whatever ``timeout_millis`` says; one still running at the deadline
        goes on in the background.)"""
        timeout = None if deadline is None else seconds_left(deadline)
        calls = [
            partial(flush, timeout_millis=int(timeout * 1000))
            if timeout is not None and _takes(flush, "timeout_millis")
            else flush
            for flush in flushes(self._provider())
        ]
        return call_within(calls, timeout, "a span processor's force_flush", "otel-ort-flush")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for pending conversions, then flush the tracer provider; ``False`` if that
        took more than ``timeout`` seconds or the provider's flush failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = self.worker.drain(timeout)
        flushed = self._flush_provider(deadline)
        return done and flushed.finished and not flushed.failed

    def shutdown(self, timeout: float = _SHUTDOWN_TIMEOUT_S) -> None:
        """Convert what is pending, flush spans, close perf counters, stop the worker thread:
        within ``timeout`` in all. Once: ``uninstrument()`` or the interpreter's exit."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        deadline = time.monotonic() + timeout
        if not self.worker.stop(timeout):
            _logger.warning(
                "otel-ort: %d profiled run(s) were still waiting for the worker at shutdown "
                "after %g s: their spans are sent only if it finishes them before the "
                "process ends",
                self.worker.unfinished,
                timeout,
            )
        if not self._flush_provider(deadline).finished:  # a failure is the provider's to say
            _logger.warning(
                "otel-ort: the tracer provider's flush had not finished at shutdown after %g "
                "s; the spans it was still exporting are left to the provider's own shutdown",
                timeout,
            )
        for close in self._pools:
            close()
        if self.perf is not None:
            self.perf.close()

    def _after_fork_in_child(self) -> None:
        self.worker.reset_after_fork()
        self._lock = threading.Lock()
        self._prepare_lock = threading.Lock()
        self._counts_lock = threading.Lock()
        self._counts = Counter()  # counts() are this process's
        if self._store is not None:
            self._store.after_fork_in_child()
        for close in self._pools:  # the parent's threads: not this process's
            detached = close.detach()
            if detached is not None:
                detached[1](forked_child=True)
        self._pools = []
        self._ready.clear()
        if self.perf is not None:
            self.perf.after_fork_in_child()


@dataclass(frozen=True, slots=True)
class _Fixed:
    """What profiling needs to know of a session that its runs do not change."""

    providers: object
    """The session's providers list when this was read: ORT replaces it when it rebuilds
    the session (its EP fallback)."""
    refusal: Skipped | None
    sequential: bool


def _fixed(session: Any) -> _Fixed:
    """The session's ``_Fixed``, read on its first selected run (and again once ORT has
    rebuilt it)."""
    providers = getattr(session, "_providers", None)
    fixed = session.__dict__.get(_FIXED_KEY)
    if not isinstance(fixed, _Fixed) or fixed.providers is not providers:
        live = session.get_session_options()
        sequential = live.execution_mode == ExecutionMode.ORT_SEQUENTIAL
        fixed = _Fixed(providers, _unprofilable(session, live), sequential)
        session.__dict__[_FIXED_KEY] = fixed
    return fixed


def _unprofilable(session: Any, live: Any) -> Skipped | None:
    """Why no run of ``session`` (``live``: its options) can be profiled, if none can."""
    if live.enable_profiling:
        return semconv.SKIP_SESSION_PROFILING, (
            "the session profiles itself (SessionOptions.enable_profiling): ORT ignores "
            "run-level profiling then"
        )
    cuda = session.get_provider_options().get("CUDAExecutionProvider", {})
    if str(cuda.get("enable_cuda_graph", "0")).strip().lower() in ("1", "true"):
        return semconv.SKIP_CUDA_GRAPH, (
            "the session replays CUDA graphs (enable_cuda_graph): a replayed run executes no node"
        )
    return None


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


def _shut_down(reference: Callable[[], Profiler | None]) -> None:
    profiler = reference()
    if profiler is not None:
        try:  # an exception here would skip the joining of the user's non-daemon threads
            profiler.shutdown()
        except Exception:
            report_failure("could not shut profiling down at exit")

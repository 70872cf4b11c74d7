"""The profiling engine: runs selected by the sampler execute on the session's twin with ORT's
run-level profiling; a background worker turns each profile into spans and a kept file.

Request thread (``attempt``): find the session's twin (or ask the worker to build one and run
normally this time), run the twin with a fresh profile prefix, return its outputs. Anything
that prevents profiling returns a skip reason instead, and the caller runs ORT normally:
profiling never changes what a run returns or raises. Runs not selected may run on the twin
too (``serves``): all it can take in serve mode; in twin mode, the run before one the sampler
expects to profile (a warm-up: the profiled run then finds the twin's caches warm).

Worker (``finish``): read the profile, hang node and kernel spans under the run span, end the
run span (at the time the run ended), write the enriched Chrome JSON, apply retention.

Lifecycle: a twin is closed when its session is garbage collected, at ``shutdown`` (on
``uninstrument()`` and at interpreter exit, after pending profiles were converted and the
provider flushed), and abandoned in a forked child, where the worker starts afresh.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from onnxruntime import RunOptions
from opentelemetry import trace
from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, get_meter
from opentelemetry.trace import Span, format_span_id, format_trace_id

from otel_ort import semconv
from otel_ort.bounded import Outcome, call_within, seconds_left
from otel_ort.capi import (
    CApi,
    CSession,
    OrtError,
    SessionConfig,
    UnsupportedOutput,
    UnsupportedValue,
    load_api,
)
from otel_ort.delivery import NotSdkTracerProvider, SpanDelivery, flushes
from otel_ort.failures import report_failure
from otel_ort.forking import after_fork_in_child
from otel_ort.options import ProfilingOptions
from otel_ort.perf.counting import Counting, PerfCounters, Pool, RawRun
from otel_ort.perf.report import count_profile
from otel_ort.profiling.kept import publish_run, read_run
from otel_ort.profiling.model import Profile
from otel_ort.profiling.reader import ProfileError
from otel_ort.profiling.recorded_options import following_terminate, model_file
from otel_ort.profiling.store import (
    ProfileDirError,
    ProfileStore,
    RunFiles,
    default_profile_dir,
    remove_files,
)
from otel_ort.profiling.twin import (
    Twin,
    TwinUnavailable,
    required_inputs,
    run_options_arguments,
    twin_config,
)
from otel_ort.profiling.worker import Worker
from otel_ort.sampling import PROFILE_BAGGAGE_KEY, Never, ProfileSampler, take_forced
from otel_ort.session_facts import facts_for
from otel_ort.spans import SpanBuilder
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

_TWIN_KEY = "_otel_ort_twin"
_MAX_PRIMING_ATTEMPTS = 3
_MAX_DETAIL = 512
_SHUT_DOWN = "otel-ort's profiling was shut down"
_SHUTDOWN_TIMEOUT_S = 30.0
_RUN_PARAMETERS = ("output_names", "input_feed", "run_options")
_MISMATCH = "the call does not match run(output_names, input_feed, run_options=None)"


@dataclass(frozen=True, slots=True)
class ProfiledRun:
    """What the worker needs of a profiled run (not its outputs: they are the caller's)."""

    files: RunFiles
    start_ns: int
    thread: tuple[int, str]
    """OS thread id and name of the thread that ran it."""
    counters: RawRun | str | None = None
    """What perf counted, or why nothing was (``None``: perf counters are off)."""


@dataclass(frozen=True, slots=True)
class Profiled:
    """A run that executed on the twin with profiling: its outputs, and what to convert."""

    outputs: list[Any]
    run: ProfiledRun


Skipped = tuple[str, str]
"""(reason, detail): why a selected run was not profiled."""


class Profiler:
    """Selects, runs and converts profiled runs for one ``instrument()``."""

    def __init__(
        self,
        options: ProfilingOptions,
        tracer_provider: Any = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.sampler = options.sampler
        self._sampled = type(self.sampler) is not Never  # Never: no call per run
        self._hints = type(self.sampler).profiles_next is not ProfileSampler.profiles_next
        """The sampler can tell a profiled run ahead (else twin mode asks no hint)."""
        self.serve_mode = options.mode == "serve"
        """Twins run every unprofiled run they can (see ``serves``)."""
        self._options = options
        self._tracer_provider = tracer_provider
        self._store: ProfileStore | None = None
        self._unavailable = ""  # why profiling cannot work at all here, once known
        if options.directory is not None:  # checked by the options; the default: in _plan
            self._store = ProfileStore(options.directory, options.max_files, options.max_bytes)
        self.worker = Worker("otel-ort-profiler")
        perf = options.perf
        self.perf = PerfCounters(perf.events, perf.period_ns, perf.explicit) if perf else None
        self._lock = threading.Lock()
        self._shut_down = False
        self._twins: weakref.WeakSet[Twin] = weakref.WeakSet()
        self._api: CApi | None = None
        self._delivery: tuple[object, SpanBuilder, SpanDelivery] | None = None
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
        self._fallbacks_counter = meter.create_counter(
            semconv.METRIC_SERVE_FALLBACKS,
            "{run}",
            "Unprofiled runs the twin did not complete (serve mode's and warm-ups; not those "
            "RunOptions.terminate ended), run again on ORT's own session.",
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
        return self._sampled and self.sampler.should_profile(span.get_span_context())

    def attempt(self, session: Any, method: str, args: Any, kwargs: Any) -> Profiled | Skipped:
        """Run a selected run on the session's twin, profiled; or say why not."""
        if method != "run":
            return semconv.SKIP_METHOD, f"{method} is not profiled: only run() has a twin"
        call = _twin_call(args, kwargs)
        if isinstance(call, str):
            return semconv.SKIP_VALUE, call
        output_names, feeds, run_options = call
        twin = self._serving_twin(session, feeds, output_names)
        if isinstance(twin, tuple):
            return twin
        if not twin.has_required(feeds):
            return semconv.SKIP_VALUE, "required inputs are missing: ORT's own run raises"
        return self._run_profiled(twin, feeds, output_names, run_options)

    def serves(self, session: Any, span: Span) -> bool:
        """Whether a run not selected for profiling is offered to the session's twin: every
        one in serve mode; in twin mode, one the sampler expects the next run to be profiled
        after, when the twin is ready (it warms the twin's caches for that run)."""
        if self.serve_mode:
            return True
        if not self._hints:
            return False
        twin: Twin | None = session.__dict__.get(_TWIN_KEY)
        if twin is None or twin.state != "ready" or not twin.serves_unprofiled:
            return False
        try:
            return self.sampler.profiles_next(span.get_span_context())
        except Exception:  # a bug of the user's sampler, reported like a hook's
            report_failure("profile_sampler raised")
            return False

    def run_unprofiled(
        self,
        wrapped: Callable[..., Any],
        span: Span,
        session: Any,
        method: str,
        args: Any,
        kwargs: Any,
    ) -> Any:
        """A run ``serves`` offered to the twin: on the session's ready twin when the call
        allows it (which keeps the twin's caches warm for profiled runs; in twin mode its span
        says ``onnxruntime.profile.warmup``), else ORT's own ``wrapped``. Returns or raises
        what ``wrapped`` would: a run the twin fails is run again there."""
        if method == "run":
            try:
                outputs = self._serve(session, args, kwargs)
            except Exception:
                report_failure("could not serve a run on its twin")
                outputs = None
            if outputs is not None:
                if not self.serve_mode and span.is_recording():
                    span.set_attribute(semconv.PROFILE_WARMUP, True)
                return outputs
        return wrapped(*args, **kwargs)

    def _serve(self, session: Any, args: Any, kwargs: Any) -> list[Any] | None:
        """The run's outputs from the twin; ``None`` where the session must run it: a call the
        twin cannot take (or whose ``RunOptions`` it cannot reproduce), no ready twin (in serve
        mode the first such run asks for one), a profiled run in progress on the twin (its
        pool's counts must be its own), or the twin's failure."""
        twin: Twin | None = session.__dict__.get(_TWIN_KEY)
        current = twin is not None and twin.state != "closed" and twin.matches(self, session)
        if twin is not None and current:
            pool = twin.pool  # first what needs no look at the call: most unserved runs
            if not twin.serves_unprofiled or (pool is not None and pool.lock.locked()):
                return None  # building, failed, not serving, or counting a profiled run
        call = _twin_call(args, kwargs)
        if isinstance(call, str):
            return None
        output_names, feeds, run_options = call
        if twin is None or not current or twin.state != "ready":
            if self.serve_mode:
                self._serving_twin(session, feeds, output_names)  # builds one if there is none
            return None
        if not twin.has_required(feeds):
            return None
        try:
            arguments = run_options_arguments(run_options)
        except TwinUnavailable:
            return None
        return self._served(twin, feeds, output_names, run_options, arguments)

    def _served(
        self,
        twin: Twin,
        feeds: dict[str, Any],
        output_names: Any,
        run_options: Any,
        arguments: dict[str, Any],
    ) -> list[Any] | None:
        """The twin's outputs; ``None`` if it fails (counted, but for a terminated run):
        ORT's own run then returns or raises as it would. A pool whose counters stay on (twin
        mode's warm-up) is held for the run, as a profiled run holds it (``None`` if one does:
        a profiled run that comes meanwhile waits), and its counts are set aside."""
        termination = None
        pool = twin.pool if twin.pool is not None and twin.pool.stays_on else None
        if pool is not None and not pool.lock.acquire(blocking=False):
            return None
        try:
            with following_terminate(run_options) as termination, _set_aside(pool):
                outputs, _ = twin.run(
                    feeds, output_names or None, termination=termination, **arguments
                )
            return outputs
        except Exception as exc:
            if termination is not None and termination.requested:
                return None  # asked for: ORT's run sees the flag too, as without otel-ort
            self._count("serve_fallbacks")
            self._fallbacks_counter.add(1)
            if isinstance(exc, UnsupportedOutput):  # the model's: stop rather than fail again
                twin.serves_unprofiled = False
            return None
        finally:
            if pool is not None:
                pool.lock.release()

    def _run_profiled(
        self, twin: Twin, feeds: dict[str, Any], output_names: Any, run_options: Any
    ) -> Profiled | Skipped:
        """The run on the twin, with a fresh profile prefix and a place for its conversion."""
        try:
            arguments = run_options_arguments(run_options)
        except TwinUnavailable as exc:
            return semconv.SKIP_TWIN_UNAVAILABLE, str(exc)
        assert self._store is not None  # a twin is ready only once the store is
        if not self.worker.reserve():  # the conversion's place, so that no profile is lost
            return self._no_room(f"{self.worker.pending} profiles wait for conversion")
        files: RunFiles | None = None
        try:
            files = self._store.new_run()
            with following_terminate(run_options) as termination:
                counting = self._begin_counting(twin)
                try:
                    outputs, start_ns = twin.run(
                        feeds,
                        output_names or None,
                        profile_prefix=files.prefix,
                        termination=termination,
                        **arguments,
                    )
                finally:
                    counters = self._end_counting(counting, twin)
        except BaseException as exc:  # ORT's error on the twin: ORT's own run will say it again
            self.worker.release()
            if files is not None:
                self._discard(files)
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: the caller's
                raise
            reason = semconv.SKIP_VALUE if isinstance(exc, UnsupportedValue) else None
            return reason or semconv.SKIP_TWIN_ERROR, str(exc)
        thread = (threading.get_native_id(), threading.current_thread().name)
        return Profiled(outputs, ProfiledRun(files, start_ns, thread, counters))

    def _begin_counting(self, twin: Twin) -> Counting | str | None:
        """Start perf counting for a run on ``twin``, or why not (``None``: perf is off)."""
        if self.perf is None:
            return None
        if twin.pool is None:
            return self.perf.unavailable or "the twin's threads are not counted"
        return self.perf.begin(twin.pool)

    def _end_counting(self, counting: Counting | str | None, twin: Twin) -> RawRun | str | None:
        if not isinstance(counting, Counting):
            return counting
        assert self.perf is not None
        csession = twin.session
        return self.perf.end(
            counting, caller_runs_nodes=csession is not None and csession.sequential
        )

    def _serving_twin(
        self, session: Any, feeds: dict[str, Any], output_names: Any
    ) -> Twin | Skipped:
        """The session's twin if it is ready to run a profiled run now; else why not (asking
        the worker to build one when the session has none)."""
        # shut down: runs of other threads at exit, or during uninstrument()
        unavailable = self._unavailable or (_SHUT_DOWN if self._shut_down else "")
        if unavailable:
            return semconv.SKIP_UNAVAILABLE, unavailable
        twin: Twin | None = session.__dict__.get(_TWIN_KEY)
        if twin is None or twin.state == "closed" or not twin.matches(self, session):
            return self._start_twin(session, feeds, output_names)
        if twin.state == "building":
            return semconv.SKIP_TWIN_NOT_READY, "the twin is being built"
        if twin.state == "unprimed":
            return self._prime_again(twin, session, feeds, output_names)
        if twin.state != "ready":
            return semconv.SKIP_TWIN_UNAVAILABLE, twin.reason
        return twin

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
                    semconv.PROFILE_SKIP_DETAIL: detail[:_MAX_DETAIL],
                }
            )
        self._count_run(reason)

    def finish(self, span: Span, end_ns: int, run: ProfiledRun, session_facts: Any) -> None:
        """Hand a profiled run to the worker (into the place ``attempt`` reserved); the worker
        ends ``span`` at ``end_ns``."""
        if not self.worker.submit(
            lambda: self._convert(span, end_ns, run, session_facts), reserved=True
        ):  # its thread could not start (logged)
            self._count_run("profiled")
            self._count_run(semconv.PROFILE_ERROR_OUTCOME)
            self._discard(run.files)
            _end(span, end_ns, "not converted: otel-ort's worker thread could not start")

    # -- twins ----------------------------------------------------------------------------

    def _start_twin(self, session: Any, feeds: dict[str, Any], output_names: Any) -> Skipped:
        copied = _priming_copies(feeds)
        with self._lock:
            twin = session.__dict__.get(_TWIN_KEY)
            if twin is not None and twin.state != "closed" and twin.matches(self, session):
                return semconv.SKIP_TWIN_NOT_READY, "the twin is being built"
            if not self.worker.reserve():  # first: a twin that cannot be built is not made
                return self._no_room("no room in the worker's queue to build the twin")
            # a twin of another profiler or process, or of the session before ORT rebuilt
            # it: its attempts are not this one's
            attempts = twin.attempts + 1 if twin and twin.matches(self, session) else 1
            superseded = twin if twin is not None and twin.state != "closed" else None
            twin = Twin(weakref.ref(self), getattr(session, "_providers", None), attempts)
            session.__dict__[_TWIN_KEY] = twin
            self._twins.add(twin)
            weakref.finalize(session, _release_twin, weakref.ref(self), twin)
        if superseded is not None:  # ORT rebuilt the session; released once its runs end
            close = partial(superseded.close, 0)
            if not self.worker.submit(close):  # no room in the queue: here, then
                close()
        session_ref = weakref.ref(session)
        if not self.worker.submit(
            lambda: _guarded(
                twin, lambda: self._build(twin, session_ref, copied, output_names, attempts)
            ),
            reserved=True,
        ):  # its thread could not start (logged)
            twin.fail("otel-ort's worker thread could not start to build the twin")
            return semconv.SKIP_TWIN_UNAVAILABLE, twin.reason
        return semconv.SKIP_TWIN_NOT_READY, "the twin is being built"

    def _build(
        self,
        twin: Twin,
        session_ref: Callable[[], Any],
        feeds: dict[str, Any],
        output_names: Any,
        attempts: int,
    ) -> None:
        """Worker: create the twin, prime it with one profiled run, let it serve."""
        session = session_ref()
        if session is None or twin.state != "building":
            return
        plan = self._plan(twin, session)
        del session  # the twin must not keep the session alive
        if plan is None:
            return
        config, model_changed, required, serves = plan
        api, store = self._api, self._store
        assert api is not None and store is not None
        try:
            csession = CSession(config, api)
        except (OrtError, UnsupportedValue) as exc:
            twin.fail(f"the twin could not be created: {exc}")
            return
        problem = model_changed()  # again: a new export may have come while ORT read the file
        if problem:
            csession.close()
            twin.fail(problem)
            return
        self._prime(twin, csession, feeds, output_names, attempts, serves, required)

    def _prime(
        self,
        twin: Twin,
        csession: CSession,
        feeds: dict[str, Any],
        output_names: Any,
        attempts: int,
        serves: bool,
        required: frozenset[str],
    ) -> None:
        """Worker: the twin's first profiled run, alone, then it serves. Inputs ORT refuses
        (a client's bad request) leave it built, waiting for another run's inputs."""
        store = self._store
        assert store is not None
        if not feeds.keys() >= required:
            missing = ", ".join(sorted(required - feeds.keys()))
            twin.unprimed(csession, f"inputs missing: {missing}", serves, required)
            return
        files = store.scratch_run()  # the first published file is number 1
        try:
            csession.run(feeds, output_names or None, profile_prefix=files.prefix)
        except UnsupportedOutput:  # ORT's run was done: only an output could not be returned
            serves = False  # the runs asking for it would fail alike; profiled runs may not ask
        except Exception as exc:
            if _refuses_inputs(exc):
                twin.unprimed(csession, f"ORT refused the inputs: {exc}", serves, required)
                return
            csession.close()
            if attempts >= _MAX_PRIMING_ATTEMPTS:
                twin.fail(f"priming the twin failed {attempts} times, last: {exc}")
            else:
                twin.close()  # the next selected run tries again, with its own inputs
            return
        finally:
            remove_files(store.written(files))
        pool = self._perf_pool(csession, stays_on=not (serves and self.serve_mode))
        twin.ready(csession, pool, serves_unprofiled=serves, required_inputs=required)

    def _prime_again(
        self, twin: Twin, session: Any, feeds: dict[str, Any], output_names: Any
    ) -> Skipped:
        """An unprimed twin (ORT refused the inputs it was to be primed with): prime it with
        this run's, on the worker."""
        copied = _priming_copies(feeds)
        if not self.worker.reserve():
            return self._no_room("no room in the worker's queue to prime the twin")
        csession = twin.take_unprimed()
        if csession is None:  # another run's inputs got there first
            self.worker.release()
            return semconv.SKIP_TWIN_NOT_READY, "the twin is being built"
        attempts = twin.attempts
        serves, required = twin.serves_unprofiled, twin.required_inputs
        if not self.worker.submit(
            lambda: _guarded(
                twin,
                lambda: self._prime(
                    twin, csession, copied, output_names, attempts, serves, required
                ),
            ),
            reserved=True,
        ):  # its thread could not start (logged)
            csession.close()
            twin.fail("otel-ort's worker thread could not start to prime the twin")
            return semconv.SKIP_TWIN_UNAVAILABLE, twin.reason
        return semconv.SKIP_TWIN_NOT_READY, "the twin is being primed"

    def _plan(
        self, twin: Twin, session: Any
    ) -> tuple[SessionConfig, Callable[[], str], frozenset[str], bool] | None:
        """Worker: what the twin of ``session`` is made from (its config, a check of why its
        model file may have changed, the inputs a run needs, whether it serves unprofiled
        runs); ``None`` if it cannot be made (the twin then failed, and the log says why)."""
        try:
            if self._store is None:
                self._store = ProfileStore(
                    default_profile_dir(), self._options.max_files, self._options.max_bytes
                )
            api = self._api = self._api or load_api()
            if not api.supports_run_profiling:
                raise TwinUnavailable(
                    f"run-level profiling needs ONNX Runtime >= 1.25 (C API 25); "
                    f"this is {api.ort_version}"
                )
            config = twin_config(session)
        except TwinUnavailable as exc:  # this session's
            model = facts_for(session).run_attributes[semconv.MODEL_PATH]
            twin.fail(str(exc))
            _logger.warning("otel-ort: runs of %s cannot be profiled: %s", model, exc)
            return None
        except (ProfileDirError, OSError) as exc:  # every session's
            reason = f"profile_dir: {exc}" if isinstance(exc, ProfileDirError) else str(exc)
            twin.fail(reason)
            self._unavailable = reason
            _logger.warning("otel-ort: runs cannot be profiled: %s", reason)
            return None
        # a session profiling itself must run every run: its file must hold them all
        serves = not session.get_session_options().enable_profiling
        from_file = model_file(session)
        model_changed = from_file[1] if from_file is not None else _model_bytes_unchanged
        return config, model_changed, required_inputs(session), serves

    def _perf_pool(self, csession: CSession, *, stays_on: bool) -> Pool | None:
        """perf groups on the twin's threads (``stays_on``: enabled for the twin's life, when
        it runs profiled runs only); ``None`` (and why, on runs) if perf is off or cannot
        count: that never stops the twin from serving."""
        if self.perf is None:
            return None
        try:
            if not self.perf.prepare():
                return None
            return self.perf.pool(csession.thread_ids, stays_on=stays_on)
        except Exception:
            report_failure("could not prepare perf counters")
            return None

    # -- worker: conversion -----------------------------------------------------------------

    def _convert(self, span: Span, end_ns: int, run: ProfiledRun, session_facts: Any) -> None:
        """Worker: the run's spans and kept file; the run span ends whatever happens, a problem
        is counted (``profile_error``) and said on it, ORT's raw file never stays behind."""
        self._count_run("profiled")  # here, not on the request thread
        problems: list[str] = []
        if isinstance(run.counters, RawRun):  # first, or the pool's next run will have to
            run.counters.settle()  # (never raises: what it cannot read becomes a problem)
        try:
            self._keep_profile(span, run, session_facts, problems)
        except Exception as exc:
            problems.append(f"keeping the profile failed: {exc!r}")
            report_failure("could not keep a profiled run's profile")
        finally:
            if self._store is not None:
                remove_files(self._store.written(run.files))
            if problems:
                self._count_run(semconv.PROFILE_ERROR_OUTCOME)
            _end(span, end_ns, "; ".join(problems))

    def _keep_profile(
        self, span: Span, run: ProfiledRun, session_facts: Any, problems: list[str]
    ) -> None:
        """Spans, enriched file, retention; what went wrong goes to ``problems``."""
        store = self._store
        assert store is not None  # a profiled run had a store
        try:
            profile = read_run(store, run.files, run.start_ns)
        except ProfileError as exc:
            problems.append(str(exc))
            return
        node_counts: list[dict[str, Any]] = []
        if run.counters is not None and profile.runs:
            node_counts = self._perf_counts(span, profile, run.counters, problems)
        if span.is_recording() and profile.runs:
            try:
                dropped, summary = self._emit(profile, span, node_counts)
            except NotSdkTracerProvider as exc:  # no node spans; the file is still kept
                problems.append(f"{exc}; the Chrome JSON is still kept")
            else:
                span.set_attributes(summary)
                if dropped:
                    span.set_attribute(semconv.PROFILE_SPANS_DROPPED, dropped)
                    self._count("spans_dropped", dropped)
                    self._dropped_counter.add(dropped)
        context = span.get_span_context()
        other_data = {
            "session_id": session_facts.session_id,
            "model": session_facts.run_attributes.get(semconv.MODEL_PATH, "unknown"),
            "otel_ort_version": __version__,
        }
        if context.is_valid:  # not without an SDK tracer provider: no trace to point to
            other_data["trace_id"] = format_trace_id(context.trace_id)
            other_data["span_id"] = format_span_id(context.span_id)
        deleted = publish_run(store, run.files, profile, other_data, run.thread)
        if deleted:
            self._count("files_deleted", deleted)
            self._deleted_counter.add(deleted)

    def _perf_counts(
        self, span: Span, profile: Profile, counters: RawRun | str, problems: list[str]
    ) -> list[dict[str, Any]]:
        """perf counts: totals on the run span, counter tracks added to the profile's events;
        returns the node spans' attributes (in node order)."""
        assert self.perf is not None
        if isinstance(counters, str):
            if span.is_recording():
                span.set_attribute(
                    semconv.PERF_UNAVAILABLE, [*self.perf.unavailable_events, counters]
                )
            return []
        try:
            counts = count_profile(self.perf, profile, counters)
        except Exception as exc:
            problems.append(f"attributing perf counts failed: {exc!r}")
            report_failure("could not attribute perf counts")
            return []
        if span.is_recording():
            span.set_attributes(counts.run)
        return counts.nodes

    def _emit(
        self, profile: Any, span: Span, node_counts: list[dict[str, Any]]
    ) -> tuple[int, dict[str, Any]]:
        """Node and kernel spans under the live run span; (dropped, run summary)."""
        provider = self._provider()
        if self._delivery is None or self._delivery[0] is not provider:
            delivery = SpanDelivery(provider)  # first: it refuses a provider not the SDK's
            self._delivery = (provider, SpanBuilder(provider), delivery)
        _, builder, delivery = self._delivery
        spans, summary = builder.node_spans(
            profile, profile.runs[0], span.get_span_context(), node_counts
        )
        return delivery.deliver(spans), summary

    # -- housekeeping -----------------------------------------------------------------------

    def _discard(self, files: RunFiles) -> None:
        """Delete what ORT wrote for a run that is not kept (off the request thread)."""
        store = self._store
        if store is not None and not self.worker.submit(lambda: remove_files(store.written(files))):
            remove_files(store.written(files))

    def _count_run(self, outcome: str) -> None:
        self._count(outcome)
        self._runs_counter.add(1, {semconv.PROFILE_OUTCOME: outcome})

    def _count(self, what: str, number: int = 1) -> None:
        with self._counts_lock:
            self._counts[what] += number

    def counts(self) -> dict[str, int]:
        """This process's totals: selected runs by outcome (``profiled`` or the skip reason),
        ``spans_dropped``, ``files_deleted``, ``serve_fallbacks``."""
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
        """Wait for pending twin builds and conversions, then flush the tracer provider;
        ``False`` if that took more than ``timeout`` seconds or the provider's flush failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = self.worker.drain(timeout)
        flushed = self._flush_provider(deadline)
        return done and flushed.finished and not flushed.failed

    def shutdown(self, timeout: float = _SHUTDOWN_TIMEOUT_S) -> None:
        """Convert what is pending, flush spans, close every twin, stop the worker thread:
        within ``timeout`` in all. Once: ``uninstrument()`` or the interpreter's exit."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        deadline = time.monotonic() + timeout
        if not self.worker.stop(timeout):
            _logger.warning(
                "otel-ort: %d profiled run(s) or twin build(s) were still waiting for the "
                "worker at shutdown after %g s: their spans are sent only if it finishes "
                "them before the process ends",
                self.worker.unfinished,
                timeout,
            )
        if not self._flush_provider(deadline).finished:  # a failure is the provider's to say
            _logger.warning(
                "otel-ort: the tracer provider's flush had not finished at shutdown after %g "
                "s; the spans it was still exporting are left to the provider's own shutdown",
                timeout,
            )
        running = [twin for twin in list(self._twins) if not twin.close(seconds_left(deadline))]
        if running:
            _logger.warning(
                "otel-ort: %d twin(s) still had runs in flight at shutdown after %g s; each "
                "is released when its last run returns, or with the process",
                len(running),
                timeout,
            )
        if self.perf is not None:
            self.perf.close()

    def _after_fork_in_child(self) -> None:
        self.worker.reset_after_fork()
        self._lock = threading.Lock()
        self._counts_lock = threading.Lock()
        self._counts = Counter()  # counts() are this process's
        if self._store is not None:
            self._store.after_fork_in_child()
        for twin in list(self._twins):
            twin.close()  # abandoned: see Twin.close
        self._twins = weakref.WeakSet()
        if self.perf is not None:
            self.perf.after_fork_in_child()


def _twin_call(args: Any, kwargs: Any) -> tuple[Any, dict[str, Any], Any] | str:
    """A ``run`` call's (output_names, input_feed, run_options) if the twin can take it:
    feeds a dict of numpy arrays, output names a list or tuple (or none); else why not. A call
    that does not bind to ``run(output_names, input_feed, run_options=None)`` is ORT's to
    refuse."""
    if len(args) == 2 and not kwargs:  # the usual call: run(output_names, input_feed)
        (output_names, feeds), run_options = args, None
    else:
        bound = dict(zip(_RUN_PARAMETERS, args, strict=False))
        if len(args) > len(_RUN_PARAMETERS) or any(
            key not in _RUN_PARAMETERS or key in bound for key in kwargs
        ):
            return _MISMATCH
        bound.update(kwargs)
        if "output_names" not in bound or "input_feed" not in bound:  # no defaults
            return _MISMATCH
        output_names, feeds = bound["output_names"], bound["input_feed"]
        run_options = bound.get("run_options")
    problem = _untakeable(output_names, feeds, run_options)
    return problem or (output_names, feeds, run_options)


def _untakeable(output_names: Any, feeds: Any, run_options: Any) -> str:
    """Why the twin cannot take these ``run`` arguments, or ``""``."""
    if type(feeds) is not dict:
        return f"input_feed is a {type(feeds).__name__}, not a dict"
    if output_names is not None and not isinstance(output_names, list | tuple):
        return f"output_names is a {type(output_names).__name__}"
    for name, value in feeds.items():
        if type(value) is not np.ndarray:
            return f"input {name!r} is a {type(value).__name__}, not a numpy array"
    if run_options is not None and not isinstance(run_options, RunOptions):
        return f"run_options is a {type(run_options).__name__}, not a RunOptions"
    return ""


def _model_bytes_unchanged() -> str:
    """The model-file check of a session made from bytes: they cannot change."""
    return ""


def _takes(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``parameter``."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to read: try it
        return True
    return parameter in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


@contextmanager
def _set_aside(pool: Pool | None) -> Iterator[None]:
    """Around an unprofiled run on a held ``pool`` that stays on: settle it before (a profiled
    run's window ends there), set the run's counts aside after. A problem is reported, not
    raised: the run is the caller's."""
    if pool is None:
        yield
        return
    pool.settle()
    try:
        yield
    finally:
        try:
            pool.set_aside()
        except Exception:
            report_failure("could not set a warm-up run's perf counts aside")


def _end(span: Span, end_ns: int, problem: str) -> None:
    if problem and span.is_recording():
        span.set_attribute(semconv.PROFILE_ERROR, problem[:_MAX_DETAIL])
    span.end(end_ns)


def _priming_copies(feeds: dict[str, Any]) -> dict[str, Any]:
    """Copies of a run's feeds for the worker to prime a twin with, taken before a place is
    reserved (copying may fail): the caller may reuse or free its buffers meanwhile."""
    return {name: np.array(value, copy=True) for name, value in feeds.items()}


def _refuses_inputs(exc: Exception) -> bool:
    """Whether a twin's run failed on its inputs (ORT's own run of them fails alike)."""
    if isinstance(exc, OrtError):
        return exc.code_name == "INVALID_ARGUMENT"
    return isinstance(exc, UnsupportedValue) and not isinstance(exc, UnsupportedOutput)


def _guarded(twin: Twin, build: Callable[[], None]) -> None:
    """Run a twin's build; any failure marks the twin failed instead of leaving it building."""
    try:
        build()
    except Exception as exc:
        twin.fail(f"building the twin failed: {exc!r}")
        report_failure("could not build a twin")


def _release_twin(reference: Callable[[], Profiler | None], twin: Twin) -> None:
    """Finalizer of a session: close its twin after the work already queued for it."""
    profiler = reference()
    if profiler is None or not profiler.worker.submit(twin.close):
        twin.close()


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

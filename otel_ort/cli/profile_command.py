"""``otel-ort profile``: run a model with ORT's run-level profiling and show where the time went.

The model runs on an ``onnxruntime.InferenceSession`` (CPU provider, ORT's default options)
on inputs built from its signature: seeded random data unless ``--input`` gives a ``.npy``
file, unknown dimensions from ``--shape`` or else 1. After ``--warmup`` unprofiled runs, each
profiled run is given a fresh ``RunOptions`` on which run-level profiling is switched on
(:mod:`otel_ort.profiling.run_options`), so it gets its own file, kept in the instrumentation's
published form (``ProfileStore`` names and retention, ``chrome.enrich``); with
``--otlp-endpoint`` each run is also sent as one trace: a run span over a span per node. perf
counts the session's threads during the profiled runs (``--perf-events``, default as the
instrumentation's ``perf_events``): per node in the tables, the spans and the kept files'
counter tracks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id

from otel_ort.cli.model_inputs import (
    InputError,
    build_feeds,
    load_array,
    parse_dims,
    parse_pairs,
    read_inputs,
)
from otel_ort.cli.tables import plural, printable
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint, delivery_report
from otel_ort.export.otlp_exporters import otlp_span_exporter
from otel_ort.instrumentation.options import PerfOptions, perf_options
from otel_ort.perf.counting import Counting, PerfCounters, Pool, RawRun
from otel_ort.perf.report import ProfileCounts, count_profile
from otel_ort.profiles.chrome import VIEWERS
from otel_ort.profiles.reader import ProfileError
from otel_ort.profiles.records import Profile
from otel_ort.profiles.spans import SpanBuilder
from otel_ort.profiles.summary import summarize
from otel_ort.profiling.kept import publish_run, read_run
from otel_ort.profiling.run_options import (
    LayoutChanged,
    RunProfilingSwitch,
    Unrecognized,
    run_profiling_switch,
)
from otel_ort.profiling.session_runs import live_thread_ids, note_pool_threads, pool_threads
from otel_ort.profiling.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    ProfileDirError,
    ProfileStore,
    RunFiles,
    remove_files,
)
from otel_ort.version import __version__

DEFAULT_PROFILE_DIR = "otel-ort-profiles"
_LISTED_RUNS = 20
"""More runs than this list their first and last halves' files."""

_INPUTS_HINT = (
    "; inputs made up from the signature may not suit the model (indices, lengths, masks): "
    "give real ones with --input NAME=FILE.npy"
)


class _ModelFailed(Exception):
    """ORT failed a run on the inputs built or given (its message)."""


@contextlib.contextmanager
def _failures_explained(made_up: bool) -> Iterator[None]:
    """``_ModelFailed`` → ``UserError``, suggesting real inputs where some were ``made_up``."""
    try:
        yield
    except _ModelFailed as exc:
        hint = _INPUTS_HINT if made_up else ""
        raise UserError(f"the model failed to run on these inputs: {exc}{hint}") from None


class UserError(Exception):
    """Something the user asked for cannot be done; the message names it and the fix."""


@dataclass(frozen=True)
class ProfileRequest:
    """What ``otel-ort profile`` was asked to do."""

    model: str
    runs: int = 10
    warmup: int = 1
    shapes: Sequence[str] = ()
    """``NAME=D0,D1,...`` texts."""
    inputs: Sequence[str] = ()
    """``NAME=FILE.npy`` texts."""
    profile_dir: str = DEFAULT_PROFILE_DIR
    max_files: int = DEFAULT_MAX_FILES
    otlp_endpoint: str | None = None
    protocol: str = "grpc"
    service_name: str | None = None
    perf_events: str | None = None
    """As ``instrument(perf_events=...)``; ``None``: ``$OTEL_ORT_PERF_EVENTS`` or the defaults."""


def run_profile(
    request: ProfileRequest, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the command; report on ``out`` (stdout), problems on ``err`` (stderr); exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        _profile(request, out, err)
    except (UserError, InputError) as exc:
        print(f"otel-ort profile: {printable(str(exc))}", file=err)
        return 1
    return 0


def _profile(request: ProfileRequest, out: TextIO, err: TextIO) -> None:
    if not os.path.isfile(request.model):
        what = "is a directory" if os.path.isdir(request.model) else "not found"
        raise UserError(f"model {request.model!r} {what}: pass the path of an .onnx file")
    shapes = parse_pairs(request.shapes, "--shape", parse_dims)
    arrays = parse_pairs(request.inputs, "--input", load_array)
    perf = _perf_options(request.perf_events)
    switch = _run_profiling_switch()
    # before the profiled session opens: read_inputs's own session is gone by then, and the
    # threads it and ORT's environment started are not the profiled session's pool
    feeds, lines = build_feeds(read_inputs(request.model), shapes, arrays)
    session = _open_session(request.model, switch)
    store = _open_store(request.profile_dir, request.max_files)
    print(f"{printable(request.model)}: ONNX Runtime {session.version}, CPU", file=out)
    for line in lines:  # input names are the model's
        print(printable(line), file=out)
    print(
        f"{plural(request.warmup, 'warm-up run')}, {plural(request.runs, 'profiled run')}",
        file=out,
    )
    made_up = bool(feeds.keys() - arrays.keys())
    with _failures_explained(made_up):
        _warm_up(session, feeds, request.warmup, store, err)
    exporting, interrupted = _measure(session, feeds, request, store, perf, made_up, out, err)
    del session  # its intra-op pool's threads end before the traces leave
    if exporting is not None:
        exporting.close(out)
    if interrupted:
        raise KeyboardInterrupt  # said by the command, with its exit status


def _measure(
    session: _Session,
    feeds: dict[str, Any],
    request: ProfileRequest,
    store: ProfileStore,
    perf: PerfOptions | None,
    made_up: bool,
    out: TextIO,
    err: TextIO,
) -> tuple[_Exporting | None, bool]:
    """The profiled runs, counted, kept (and queued as traces), then their tables; what sends
    the traces, and whether Ctrl-C cut the runs short."""
    with _Counting(perf, session.pool_threads, session.sequential) as counting:
        with _failures_explained(made_up):
            runs, interrupted = _run(session, feeds, request, store, counting, err)
        exporting = _Exporting(request) if request.otlp_endpoint else None
        try:
            profiles = _keep_all(runs, store, request.model, counting, exporting, err)
        except Exception:
            if exporting is not None:  # the traces queued so far leave now, counted
                with contextlib.suppress(UserError):
                    exporting.close(out)
            raise
        finally:  # ORT's files of runs not kept (those kept are already gone)
            for run in runs:
                remove_files(store.written(run.files))
        _print_results(profiles, store, request.model, counting, out)
    return exporting, interrupted


def _print_results(
    profiles: Sequence[Profile], store: ProfileStore, model: str, counting: _Counting, out: TextIO
) -> None:
    """The kept files, one line per run (the first and last ones of many), what perf counted,
    then the tables over all runs."""
    print(f"\nProfile files, one per run ({VIEWERS}):", file=out)
    half, hidden = _LISTED_RUNS // 2, max(0, len(profiles) - _LISTED_RUNS)
    width = len(str(len(profiles)))
    for number, profile in enumerate(profiles, start=1):
        if half < number <= half + hidden:
            if number == half + 1:
                print(f"  ... {plural(hidden, 'more run')}", file=out)
            continue
        where = profile.path
        if not os.path.exists(where):
            where = "(deleted: see below)" if store.deleted else "(gone: deleted elsewhere)"
        print(f"  run {number:<{width}} {profile.runs[0].dur / 1000:8.3f} ms  {where}", file=out)
    if store.deleted:
        print(
            f"  ({store.deleted} older files deleted: {store.directory} keeps the newest "
            f"{store.max_files}, {store.max_bytes // 2**20} MiB at most)",
            file=out,
        )
    print(f"\n{counting.describe()}", file=out)
    print(f"\n{summarize(profiles, title=model)}", file=out)


def _perf_options(events: str | None) -> PerfOptions | None:
    try:
        return perf_options({"perf_events": events}, lambda key: "--" + key.replace("_", "-"))
    except ValueError as exc:  # it names the option or the variable
        raise UserError(str(exc)) from None


def _open_store(directory: str, max_files: int) -> ProfileStore:
    try:
        return ProfileStore(directory, max_files, DEFAULT_MAX_BYTES)
    except ProfileDirError as exc:
        raise UserError(f"--profile-dir: {exc}") from None


def _run_profiling_switch() -> RunProfilingSwitch:
    switch = run_profiling_switch()
    if isinstance(switch, Unrecognized):
        raise UserError(
            f"run-level profiling cannot be switched on in this ONNX Runtime ({switch.reason}); "
            "it needs 1.25 or newer on 64-bit Linux: pip install -U onnxruntime"
        )
    return switch


@dataclass(frozen=True)
class _Session:
    """The profiled ``onnxruntime.InferenceSession``, with what perf counting needs of it."""

    session: Any
    switch: RunProfilingSwitch
    version: str
    pool_threads: tuple[int, ...]
    """OS ids of the threads ORT started for the session (its intra-op pool): the process's
    new threads while it was made, less Python's (another library's would be counted too)."""
    sequential: bool
    """Nodes run one at a time, each on the thread that called ``run``."""

    def options(self, prefix: str) -> Any:
        """A fresh ``RunOptions`` profiling its run into ``<prefix>_<time>.json``."""
        import onnxruntime

        options = onnxruntime.RunOptions()
        try:
            self.switch.enable(options, prefix)
        except LayoutChanged as exc:
            raise UserError(f"run-level profiling could not be switched on: {exc}") from None
        return options

    def run(self, feeds: dict[str, Any], options: Any = None) -> None:
        """One run; ``_ModelFailed`` with ORT's message if it fails."""
        try:
            self.session.run(None, feeds, options)
        except Exception as exc:  # ORT's own exception types
            raise _ModelFailed(str(exc)) from None


def _open_session(model: str, switch: RunProfilingSwitch) -> _Session:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # ORT's log lines would repeat the errors said here
    before = live_thread_ids()
    try:
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT's own exception types
        raise UserError(f"{model}: ONNX Runtime cannot open this model: {exc}") from None
    note_pool_threads(session, before)
    mode = session.get_session_options().execution_mode
    return _Session(
        session,
        switch,
        onnxruntime.__version__,
        pool_threads(session) or (),
        mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL,
    )


@dataclass(frozen=True)
class _ProfiledRun:
    files: RunFiles
    start_ns: int
    counted: RawRun | str | None
    """What perf counted, why nothing (or ``None``: perf is off)."""


class _Counting:
    """perf counting of the session's threads (the calling thread and ORT's intra-op pool)
    during each profiled run, as the engine counts a session's (switched on and off
    around each run, so ORT's pool spinning between runs is not counted); off, or saying why
    not, where perf cannot count. Never raises: what goes wrong is said in ``describe``."""

    def __init__(
        self, options: PerfOptions | None, threads: Sequence[int], sequential: bool
    ) -> None:
        self._caller_runs_nodes = sequential
        self._perf: PerfCounters | None = None
        self._pool: Pool | None = None
        self._problems: Counter[str] = Counter()
        """Why runs, or some of their threads, were not counted: how many runs each."""
        self._runs = 0
        if options is not None:
            self._perf = PerfCounters(options.events, options.period_ns, options.explicit)
            try:
                if self._perf.prepare(quiet=True):  # switched per run: ORT's pool spinning
                    self._pool = self._perf.pool(threads)  # between
                    # runs is no run's, and no request waits on the switching here
            except Exception as exc:
                self._perf.unavailable = f"perf counters could not be set up: {exc!r}"

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._perf is not None:
            self._perf.close()

    def begin(self) -> Counting | str | None:
        if self._perf is None or self._pool is None:
            return None
        return self._perf.begin(self._pool)

    def end(self, started: Counting | str | None) -> RawRun | str | None:
        if not isinstance(started, Counting):
            return started
        assert self._perf is not None  # it began the counting
        return self._perf.end(started, caller_runs_nodes=self._caller_runs_nodes)

    def count(self, profile: Profile, counted: RawRun | str | None) -> ProfileCounts | None:
        """The run's counts per node, added to ``profile``'s events as counter tracks; the
        problems are kept for ``describe``."""
        if self._perf is None or self._pool is None:
            return None
        self._runs += 1
        if isinstance(counted, str):
            self._problems[counted] += 1
            return None
        if counted is None or not profile.runs:  # (an empty profile: the run failed)
            return None
        try:
            counts = count_profile(self._perf, profile, counted)
        except Exception as exc:
            self._problems[f"attributing perf counts failed: {exc!r}"] += 1
            return None
        self._problems.update(set(counts.problems))
        return counts

    def describe(self) -> str:
        """What perf counted, each event it could not count and why, and what went wrong in
        some runs."""
        if self._perf is None:
            return "perf counters: off (--perf-events off, or OTEL_ORT_PERF_EVENTS=off)"
        if self._pool is None:
            return f"perf counters: none ({self._perf.unavailable})"
        counted = ", ".join(self._perf.counted_aliases)
        lines = [f"perf counters: {counted} (per node in the tables below)"]
        lines += [f"  not counted: {line}" for line in self._perf.unavailable_events]
        lines += [f"  {line}" for line in self._pool.problems]
        lines += [
            f"  in {runs} of {self._runs} runs: {problem}"
            for problem, runs in self._problems.most_common()
        ]
        return "\n".join(lines)


def _warm_up(
    session: _Session, feeds: dict[str, Any], runs: int, store: ProfileStore, err: TextIO
) -> None:
    """The unprofiled warm-up runs, then a profiled run whose profile ORT cannot write (its
    prefix is in a directory that does not exist): ORT starts its profiler on a session's
    first one (about a millisecond), which is no run's time."""
    progress = _Progress(runs, err, "warm-up")
    for done in range(1, runs + 1):
        session.run(feeds)
        progress.update(done)
    session.run(feeds, session.options(store.void_prefix()))


def _run(
    session: _Session,
    feeds: dict[str, Any],
    request: ProfileRequest,
    store: ProfileStore,
    counting: _Counting,
    err: TextIO,
) -> tuple[list[_ProfiledRun], bool]:
    """The profiled runs, each with its own RunOptions and file prefix, counted; each profile's
    time base is read just before the run is called (ORT's starts once it has checked the
    inputs); and whether Ctrl-C cut them short (then the runs done are returned: those kept are
    shown, the exit status is 130)."""
    runs: list[_ProfiledRun] = []
    progress = _Progress(request.runs, err, "profiled")
    files: RunFiles | None = None
    try:
        for done in range(1, request.runs + 1):
            files = store.new_run()
            options = session.options(files.prefix)
            started = counting.begin()
            start_ns = time.time_ns()
            try:
                session.run(feeds, options)
            finally:
                counted = counting.end(started)
                runs.append(_ProfiledRun(files, start_ns, counted))
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
    except (_ModelFailed, UserError):
        if files is not None:  # (a run whose profiling was not switched on is not in runs)
            remove_files(store.written(files))
        for run in runs:
            remove_files(store.written(run.files))
        raise
    return runs, False


class _Progress:
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
        if self._tty:
            filled = self._WIDTH * done // self._total
            bar = "#" * filled + "." * (self._WIDTH - filled)
            end = "\n" if done == self._total else ""
            line = f"\r{self._verb:>8} [{bar}] {done}/{self._total}"
            print(line, end=end, file=self._stream, flush=True)
        elif done * 10 // self._total > self._tenths:
            self._tenths = done * 10 // self._total
            print(f"{self._verb} {done}/{self._total} runs", file=self._stream, flush=True)


class _Exporting:
    """Sends each run's span tree as its own trace over OTLP."""

    def __init__(self, request: ProfileRequest) -> None:
        assert request.otlp_endpoint is not None
        self.endpoint = request.otlp_endpoint
        service = request.service_name or os.environ.get("OTEL_SERVICE_NAME") or "onnxruntime"
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        inner = otlp_span_exporter(request.protocol, self.endpoint)
        self.exporter = CountingSpanExporter(inner, Endpoint(self.endpoint, pause_s=0.0))
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.builder = SpanBuilder(self.provider)
        self.delivery = SpanDelivery(self.provider)
        self.traces = self.spans = 0

    def send(self, profile: Profile, counts: ProfileCounts | None) -> SpanContext:
        """Queue the span tree of the profile's run (with its perf counts); the run span's
        context."""
        run, nodes = (counts.run, counts.nodes) if counts is not None else (None, ())
        spans = self.builder.run_tree(profile, profile.runs[0], run_extra=run, node_extra=nodes)
        self.delivery.deliver(spans)  # what a processor drops, the report counts as lost
        self.spans += len(spans)
        self.traces += 1
        context = spans[-1].get_span_context()
        assert context is not None  # the builder gives every span one
        return context

    def close(self, out: TextIO) -> None:
        """Flush and shut down, report what was sent; ``UserError`` if spans were lost."""
        print(f"\nsending {plural(self.traces, 'trace')} to {self.endpoint} ...", file=out)
        self.provider.shutdown()
        summary, lost = delivery_report(self.exporter, self.endpoint, self.traces, self.spans)
        print(f"\n{summary}", file=out)
        if lost:
            raise UserError(lost)


def _keep_all(
    runs: Sequence[_ProfiledRun],
    store: ProfileStore,
    model: str,
    counting: _Counting,
    exporting: _Exporting | None,
    err: TextIO,
) -> list[Profile]:
    """``_keep`` each run, with progress; what the tables need of each (its runs, nodes and
    counter tracks: the rest of its events are in its file)."""
    profiles = []
    progress = _Progress(len(runs), err, "kept")
    for done, run in enumerate(runs, start=1):
        profile = _keep(run, store, model, counting, exporting)
        tracks = [e for e in profile.events if isinstance(e, dict) and e.get("ph") == "C"]
        profiles.append(dataclasses.replace(profile, events=tracks))
        progress.update(done)
    return profiles


def _keep(
    run: _ProfiledRun,
    store: ProfileStore,
    model: str,
    counting: _Counting,
    exporting: _Exporting | None,
) -> Profile:
    """Read ORT's file of ``run``, count its nodes, send its spans, publish the enriched file,
    drop ORT's."""
    try:
        profile = read_run(store, run.files, run.start_ns)
    except ProfileError as exc:
        raise UserError(f"ONNX Runtime's profile cannot be read: {exc}") from None
    profile = dataclasses.replace(profile, path=run.files.path)
    counts = counting.count(profile, run.counted)
    other_data: dict[str, Any] = {
        "model": os.path.abspath(model),
        "otel_ort_version": __version__,
    }
    if exporting is not None:
        context = exporting.send(profile, counts)
        other_data["trace_id"] = format_trace_id(context.trace_id)
        other_data["span_id"] = format_span_id(context.span_id)
    thread = (threading.get_native_id(), threading.current_thread().name)
    try:
        publish_run(store, run.files, profile, other_data, thread)
    except OSError as exc:
        raise UserError(
            f"cannot write profiles in {store.directory} ({exc.strerror or exc}): free some "
            "space there or choose another --profile-dir"
        ) from None
    return profile

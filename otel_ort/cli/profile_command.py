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

This module opens what the command needs and keeps each run's profile; the session is in
:mod:`~otel_ort.cli.profile_session`, the runs in :mod:`~otel_ort.cli.profile_runs`, perf in
:mod:`~otel_ort.cli.profile_perf`, the tables and the traces in
:mod:`~otel_ort.cli.profile_output`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from opentelemetry.trace import format_span_id, format_trace_id

from otel_ort.cli.model_inputs import (
    InputError,
    build_feeds,
    load_array,
    parse_dims,
    parse_pairs,
    read_inputs,
)
from otel_ort.cli.profile_output import TraceSender, print_results
from otel_ort.cli.profile_perf import CommandPerf
from otel_ort.cli.profile_runs import CommandRun, Progress, profiled_runs, warm_up
from otel_ort.cli.profile_session import CommandSession, ModelFailed, UserError
from otel_ort.cli.tables import plural, printable
from otel_ort.instrumentation.options import PerfOptions, perf_options
from otel_ort.profiles.reader import ProfileError
from otel_ort.profiles.records import Profile
from otel_ort.profiling.kept import publish_run, read_run
from otel_ort.profiling.run_options import RunProfilingSwitch, Unrecognized, run_profiling_switch
from otel_ort.profiling.session_runs import live_thread_ids, note_pool_threads, pool_threads
from otel_ort.profiling.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    ProfileDirError,
    ProfileStore,
    remove_files,
)
from otel_ort.version import __version__

DEFAULT_PROFILE_DIR = "otel-ort-profiles"

_INPUTS_HINT = (
    "; inputs made up from the signature may not suit the model (indices, lengths, masks): "
    "give real ones with --input NAME=FILE.npy"
)


@contextlib.contextmanager
def _failures_explained(made_up: bool) -> Iterator[None]:
    """``ModelFailed`` → ``UserError``, suggesting real inputs where some were ``made_up``."""
    try:
        yield
    except ModelFailed as exc:
        hint = _INPUTS_HINT if made_up else ""
        raise UserError(f"the model failed to run on these inputs: {exc}{hint}") from None


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
        warm_up(session, feeds, request.warmup, store, err)
    sender, interrupted = _measure(session, feeds, request, store, perf, made_up, out, err)
    del session  # its intra-op pool's threads end before the traces leave
    if sender is not None:
        sender.close(out)
    if interrupted:
        raise KeyboardInterrupt  # said by the command, with its exit status


def _measure(
    session: CommandSession,
    feeds: dict[str, Any],
    request: ProfileRequest,
    store: ProfileStore,
    perf: PerfOptions | None,
    made_up: bool,
    out: TextIO,
    err: TextIO,
) -> tuple[TraceSender | None, bool]:
    """The profiled runs, counted, kept (and queued as traces), then their tables; what sends
    the traces, and whether Ctrl-C cut the runs short."""
    with CommandPerf(perf, session.pool_threads, session.sequential) as counting:
        with _failures_explained(made_up):
            runs, interrupted = profiled_runs(session, feeds, request.runs, store, counting, err)
        sender = None
        if request.otlp_endpoint:
            sender = TraceSender(request.otlp_endpoint, request.protocol, request.service_name)
        try:
            profiles = _keep_all(runs, store, request.model, counting, sender, err)
        except Exception:
            if sender is not None:  # the traces queued so far leave now, counted
                with contextlib.suppress(UserError):
                    sender.close(out)
            raise
        finally:  # ORT's files of runs not kept (those kept are already gone)
            for run in runs:
                remove_files(store.written(run.files))
        print_results(profiles, store, request.model, counting, out)
    return sender, interrupted


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


def _open_session(model: str, switch: RunProfilingSwitch) -> CommandSession:
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
    return CommandSession(
        session,
        switch,
        onnxruntime.__version__,
        pool_threads(session) or (),
        mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL,
    )


def _keep_all(
    runs: Sequence[CommandRun],
    store: ProfileStore,
    model: str,
    counting: CommandPerf,
    sender: TraceSender | None,
    err: TextIO,
) -> list[Profile]:
    """``_keep`` each run, with progress; what the tables need of each (its runs, nodes and
    counter tracks: the rest of its events are in its file)."""
    profiles = []
    progress = Progress(len(runs), err, "kept")
    for done, run in enumerate(runs, start=1):
        profile = _keep(run, store, model, counting, sender)
        tracks = [e for e in profile.events if isinstance(e, dict) and e.get("ph") == "C"]
        profiles.append(dataclasses.replace(profile, events=tracks))
        progress.update(done)
    return profiles


def _keep(
    run: CommandRun,
    store: ProfileStore,
    model: str,
    counting: CommandPerf,
    sender: TraceSender | None,
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
    if sender is not None:
        context = sender.send(profile, counts)
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

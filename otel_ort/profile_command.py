"""``otel-ort profile``: run a model with ORT's run-level profiling and show where the time went.

The model runs through ORT's C API (:mod:`otel_ort.capi`: CPU provider, ORT's default options)
on inputs built from its signature: seeded random data unless ``--input`` gives a ``.npy``
file, unknown dimensions from ``--shape`` or else 1. After ``--warmup`` unprofiled runs, each
profiled run gets its own file, kept in the instrumentation's published form (``ProfileStore``
names and retention, ``chrome.enrich``); with ``--otlp-endpoint`` each run is also sent as one
trace: a run span over a span per node. perf counts the session's threads during the profiled
runs (``--perf-events``, default as the instrumentation's ``perf_events``): per node in the
tables, the spans and the kept files' counter tracks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id

from otel_ort.capi import CApi, CSession, OrtError, SessionConfig, UnsupportedValue, load_api
from otel_ort.delivery import SpanDelivery
from otel_ort.options import PerfOptions, perf_options
from otel_ort.perf.counting import Counting, PerfCounters, Pool, RawRun
from otel_ort.perf.report import ProfileCounts, count_profile
from otel_ort.pipeline import (
    CountingSpanExporter,
    Endpoint,
    delivery_report,
    otlp_span_exporter,
)
from otel_ort.profiling.chrome import VIEWERS
from otel_ort.profiling.kept import publish_run, read_run
from otel_ort.profiling.model import Profile
from otel_ort.profiling.reader import ProfileError
from otel_ort.profiling.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    ProfileDirError,
    ProfileStore,
    RunFiles,
    remove_files,
)
from otel_ort.spans import SpanBuilder
from otel_ort.summary import summarize
from otel_ort.version import __version__

DEFAULT_PROFILE_DIR = "otel-ort-profiles"
SEED = 0
_LISTED_RUNS = 20
"""More runs than this list their first and last halves' files."""

# ONNX element type (as in ORT's "tensor(float)") -> numpy dtype of the inputs built for it
_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(dtype)
    for name, dtype in (
        ("float", np.float32), ("double", np.float64), ("float16", np.float16),
        ("int8", np.int8), ("int16", np.int16), ("int32", np.int32), ("int64", np.int64),
        ("uint8", np.uint8), ("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64),
        ("bool", np.bool_), ("string", np.object_),
    )
}  # fmt: skip
_WORDS = np.array(["the", "model", "runs", "fast", "on", "random", "words", "today"], object)
_INT_HIGH = 10
"""Random integers are drawn from 0..9, valid indices for Gather and embeddings."""
_INPUTS_HINT = (
    "; inputs made up from the signature may not suit the model (indices, lengths, masks): "
    "give real ones with --input NAME=FILE.npy"
)
_NPY_MAGIC = b"\x93NUMPY"


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


@dataclass(frozen=True)
class InputSpec:
    """One model input as ORT's Python API describes it."""

    name: str
    type: str
    """``tensor(float)``, ``seq(tensor(int64))``, ..."""
    dims: tuple[int | str | None, ...]
    """Fixed sizes, symbolic names, or ``None`` when unknown."""

    @property
    def element(self) -> str:
        return self.type.removeprefix("tensor(").removesuffix(")")

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return _DTYPES.get(self.element) if self.type.startswith("tensor(") else None

    def describe(self) -> str:
        dtype = self.dtype
        element = self.element if dtype is None or dtype.kind == "O" else str(dtype)
        return f"{element}{_dims_text(self.dims)}"


def run_profile(
    request: ProfileRequest, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the command; report on ``out`` (stdout), problems on ``err`` (stderr); exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        _profile(request, out, err)
    except UserError as exc:
        print(f"otel-ort profile: {exc}", file=err)
        return 1
    return 0


def _profile(request: ProfileRequest, out: TextIO, err: TextIO) -> None:
    if not os.path.isfile(request.model):
        what = "is a directory" if os.path.isdir(request.model) else "not found"
        raise UserError(f"model {request.model!r} {what}: pass the path of an .onnx file")
    shapes = {name: _parse_dims(name, text) for name, text in _pairs(request.shapes, "--shape")}
    arrays = {name: _load_array(name, path) for name, path in _pairs(request.inputs, "--input")}
    perf = _perf_options(request.perf_events)
    api = _run_profiling_api()
    with _open_session(request.model, api) as session:
        feeds, lines = build_feeds(read_inputs(request.model), shapes, arrays)
        store = _open_store(request.profile_dir, request.max_files)
        print(f"{request.model}: ONNX Runtime {api.ort_version}, C API, CPU", file=out)
        for line in lines:
            print(line, file=out)
        print(
            f"{_plural(request.warmup, 'warm-up run')}, {_plural(request.runs, 'profiled run')}",
            file=out,
        )
        made_up = bool(feeds.keys() - arrays.keys())
        with _failures_explained(made_up):
            _warm_up(session, feeds, request.warmup, store)
        with _Counting(perf, session) as counting:
            with _failures_explained(made_up):
                runs = _run(session, feeds, request, store, counting, err)
            exporting = _Exporting(request) if request.otlp_endpoint else None
            try:
                profiles = _keep_all(runs, store, request.model, counting, exporting, err)
            finally:  # ORT's files of runs not kept (those kept are already gone)
                for run in runs:
                    remove_files(store.written(run.files))
            _print_results(profiles, store, request.model, counting, out)
    if exporting is not None:
        exporting.close(out)


def _print_results(
    profiles: Sequence[Profile], store: ProfileStore, model: str, counting: _Counting, out: TextIO
) -> None:
    """The kept files, one line per run (the first and last ones of many), what perf counted,
    then the tables over all runs."""
    print(f"\nProfile files, one per run ({VIEWERS}):", file=out)
    half, hidden = _LISTED_RUNS // 2, max(0, len(profiles) - _LISTED_RUNS)
    for number, profile in enumerate(profiles, start=1):
        if half < number <= half + hidden:
            if number == half + 1:
                print(f"  ... {_plural(hidden, 'more run')}", file=out)
            continue
        where = profile.path if os.path.exists(profile.path) else "(deleted: see below)"
        print(f"  run {number:<3} {profile.runs[0].dur / 1000:8.3f} ms  {where}", file=out)
    if store.deleted:
        print(
            f"  ({store.deleted} older files deleted: {store.directory} keeps the newest "
            f"{store.max_files}, {store.max_bytes // 2**20} MiB at most)",
            file=out,
        )
    print(f"\n{counting.describe()}", file=out)
    print(f"\n{summarize(profiles, title=model)}", file=out)


def _pairs(texts: Sequence[str], option: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` texts → (name, value) pairs."""
    pairs = []
    for text in texts:
        name, equals, value = text.partition("=")
        if not (equals and name and value):
            example = "x=1,3,224,224" if option == "--shape" else "x=batch.npy"
            raise UserError(f"{option} {text!r}: expected NAME=VALUE, e.g. {option} {example}")
        pairs.append((name, value))
    return pairs


def _parse_dims(name: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError:
        dims = (-1,)
    if any(dim < 0 for dim in dims):
        raise UserError(
            f"--shape {name}={text}: dimensions must be whole numbers separated by commas, "
            f"e.g. --shape {name}=1,3,224,224"
        )
    return dims


def _load_array(name: str, path: str) -> Any:
    try:
        with open(path, "rb") as file:
            if file.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                raise UserError(
                    f"--input {name}={path}: not a .npy file; save the array with numpy.save"
                )
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"--input {name}={path}: cannot read a .npy array from it ({exc})"
        ) from None


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


def _run_profiling_api() -> CApi:
    try:
        api = load_api()
    except OSError as exc:
        raise UserError(str(exc)) from None
    if not api.supports_run_profiling:
        raise UserError(
            f"ONNX Runtime {api.ort_version} cannot profile single runs (C API "
            f"{api.api_version}; run-level profiling needs 1.25 or newer): "
            "pip install -U onnxruntime"
        )
    return api


def _open_session(model: str, api: CApi) -> CSession:
    try:
        return CSession(SessionConfig(model=model), api)
    except (OrtError, UnsupportedValue) as exc:
        raise UserError(f"{model}: ONNX Runtime cannot open this model: {exc}") from None


def read_inputs(model: str) -> list[InputSpec]:
    """The model's inputs with their types and dimensions (read through ORT's Python API: the
    C API binding does not expose dimensions)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return [InputSpec(arg.name, arg.type, tuple(arg.shape)) for arg in session.get_inputs()]


def build_feeds(
    specs: Sequence[InputSpec],
    shapes: Mapping[str, tuple[int, ...]],
    arrays: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The feeds for ``specs`` and a line describing each input (and notes)."""
    known = {spec.name for spec in specs}
    for option, names in (("--shape", shapes), ("--input", arrays)):
        for name in names:
            if name not in known:
                raise UserError(
                    f"{option} names input {name!r}, which the model does not have; "
                    f"its inputs: {', '.join(sorted(known)) or 'none'}"
                )
    both = sorted(set(shapes) & set(arrays))
    if both:
        raise UserError(
            f"input {both[0]!r} is given by --input and --shape: an --input array has its own "
            "shape; drop one of the two"
        )
    rng = np.random.default_rng(SEED)
    feeds: dict[str, Any] = {}
    lines: list[str] = []
    for spec in specs:
        if spec.name in arrays:
            feeds[spec.name] = _checked(spec, arrays[spec.name])
            lines.append(f"input {spec.name}: {_described(feeds[spec.name])} from --input")
            continue
        dims, note = _resolved_dims(spec, shapes.get(spec.name))
        try:
            feeds[spec.name] = _random(rng, _dtype(spec), dims)
        except (MemoryError, ValueError):  # numpy: "array is too big", dimension limits
            size = math.prod(dims) * _dtype(spec).itemsize / 2**30
            raise UserError(
                f"input {spec.name}: {_dtype(spec)}[{','.join(map(str, dims))}] needs "
                f"{size:,.1f} GiB, more than this machine can give: choose smaller dimensions "
                f"with --shape {spec.name}=..."
            ) from None
        lines.append(f"input {spec.name}: {_described(feeds[spec.name])} random (seed {SEED})")
        if note:
            lines.append(note)
    return feeds, lines


def _dtype(spec: InputSpec) -> np.dtype[Any]:
    dtype = spec.dtype
    if dtype is None:
        raise UserError(
            f"input {spec.name!r} is {spec.type}: otel-ort profile can only build tensors of "
            f"{', '.join(_DTYPES)}"
        )
    return dtype


def _checked(spec: InputSpec, array: Any) -> Any:
    """``array`` if it fits ``spec``; else a ``UserError`` saying what the input expects."""
    dtype = _dtype(spec)
    if dtype.kind == "O" and array.dtype.kind not in "OU":
        fix = "save an array of str"
    elif dtype.kind != "O" and array.dtype != dtype:
        fix = f"convert it with array.astype(np.{dtype.name})"
    elif array.ndim != len(spec.dims) or any(
        isinstance(dim, int) and dim != size
        for dim, size in zip(spec.dims, array.shape, strict=True)
    ):
        fix = "save an array of that shape"
    else:
        return array
    raise UserError(
        f"--input {spec.name}: the array is {_described(array)}, but input {spec.name!r} "
        f"expects {spec.describe()}: {fix}"
    )


def _resolved_dims(spec: InputSpec, given: tuple[int, ...] | None) -> tuple[tuple[int, ...], str]:
    """The dimensions of a random input, and a note when unknown ones were set to 1."""
    if given is None:
        unknown = [dim or "?" for dim in spec.dims if not isinstance(dim, int)]
        dims = tuple(dim if isinstance(dim, int) else 1 for dim in spec.dims)
        if not unknown:
            return dims, ""
        example = ",".join(
            str(dim) if isinstance(dim, int) else (dim or f"D{index}")
            for index, dim in enumerate(spec.dims)
        )
        return dims, (
            f"note: input {spec.name}: unknown dimension{'s' * (len(unknown) > 1)} "
            f"{', '.join(unknown)} set to 1; choose with --shape {spec.name}={example}"
        )
    if len(given) != len(spec.dims):
        raise UserError(
            f"--shape {spec.name}={','.join(map(str, given))}: gives {len(given)} "
            f"dimension(s), but input {spec.name!r} has {len(spec.dims)}: {spec.describe()}"
        )
    for dim, size in zip(spec.dims, given, strict=True):
        if isinstance(dim, int) and dim != size:
            raise UserError(
                f"--shape {spec.name}={','.join(map(str, given))}: input {spec.name!r} is "
                f"{spec.describe()}; its fixed dimensions cannot change"
            )
    return given, ""


def _random(rng: np.random.Generator, dtype: np.dtype[Any], dims: tuple[int, ...]) -> Any:
    if dtype.kind == "f":  # drawn in float32 (float64 for doubles): no float64 copy
        wide = np.float64 if dtype == np.float64 else np.float32
        return rng.standard_normal(dims, dtype=wide).astype(dtype, copy=False)
    if dtype.kind in "iu":
        return rng.integers(0, _INT_HIGH, dims).astype(dtype)
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    return rng.choice(_WORDS, dims)


@dataclass(frozen=True)
class _ProfiledRun:
    files: RunFiles
    start_ns: int
    counted: RawRun | str | None
    """What perf counted, why nothing (or ``None``: perf is off)."""


class _Counting:
    """perf counting of the session's threads (the calling thread and ORT's intra-op pool)
    during each profiled run, as the engine counts a serving twin's (switched on and off
    around each run, so ORT's pool spinning between runs is not counted); off, or saying why
    not, where perf cannot count. Never raises: what goes wrong is said in ``describe``."""

    def __init__(self, options: PerfOptions | None, session: CSession) -> None:
        self._caller_runs_nodes = session.sequential
        self._perf: PerfCounters | None = None
        self._pool: Pool | None = None
        self._problems: Counter[str] = Counter()
        """Why runs, or some of their threads, were not counted: how many runs each."""
        self._runs = 0
        if options is not None:
            self._perf = PerfCounters(options.events, options.period_ns, options.explicit)
            try:
                if self._perf.prepare(quiet=True):  # switched per run: ORT's pool spinning
                    self._pool = self._perf.pool(session.thread_ids, stays_on=False)  # between
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


def _warm_up(session: CSession, feeds: dict[str, Any], runs: int, store: ProfileStore) -> None:
    """The unprofiled warm-up runs, then a profiled run that is not kept: ORT starts its
    profiler on a session's first one (about a millisecond), which is no run's time."""
    files = store.new_run()
    try:
        for _ in range(runs):
            session.run(feeds)
        session.run(feeds, profile_prefix=files.prefix)
    except (OrtError, UnsupportedValue) as exc:
        raise _ModelFailed(str(exc)) from None
    finally:
        remove_files(store.written(files))


def _run(
    session: CSession,
    feeds: dict[str, Any],
    request: ProfileRequest,
    store: ProfileStore,
    counting: _Counting,
    err: TextIO,
) -> list[_ProfiledRun]:
    """The profiled runs, each with its own file prefix, counted; each profile's time base is
    when the run called ORT (after the inputs were converted)."""
    runs: list[_ProfiledRun] = []
    progress = _Progress(request.runs, err, "profiled")
    try:
        for done in range(1, request.runs + 1):
            files = store.new_run()
            started = counting.begin()
            try:
                session.run(feeds, profile_prefix=files.prefix)
            finally:
                counted = counting.end(started)
                runs.append(_ProfiledRun(files, session.last_run_started_ns(), counted))
            progress.update(done)
    except (OrtError, UnsupportedValue) as exc:
        for run in runs:
            remove_files(store.written(run.files))
        raise _ModelFailed(str(exc)) from None
    return runs


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
        self.traces = self.dropped = 0

    def send(self, profile: Profile, counts: ProfileCounts | None) -> SpanContext:
        """Queue the span tree of the profile's run (with its perf counts); the run span's
        context."""
        run, nodes = (counts.run, counts.nodes) if counts is not None else (None, ())
        spans = self.builder.run_tree(profile, profile.runs[0], run_extra=run, node_extra=nodes)
        self.dropped += self.delivery.deliver(spans)
        self.traces += 1
        context = spans[-1].get_span_context()
        assert context is not None  # the builder gives every span one
        return context

    def close(self, out: TextIO) -> None:
        """Flush and shut down, report what was sent; ``UserError`` if spans were lost."""
        self.provider.shutdown()
        summary, lost = delivery_report(self.exporter, self.endpoint, self.traces, self.dropped)
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
    publish_run(store, run.files, profile, other_data, thread)
    return profile


def _dims_text(dims: Sequence[object]) -> str:
    return f"[{','.join('?' if dim is None else str(dim) for dim in dims)}]"


def _described(array: Any) -> str:
    dtype = "string" if array.dtype.kind in "OU" else str(array.dtype)
    return f"{dtype}{_dims_text(array.shape)}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"

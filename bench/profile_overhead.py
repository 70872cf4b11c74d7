"""Request-thread cost of a profiled run through otel-ort next to ORT's own run-level profiling
cost through the C API, same process; and the resident memory of a session's twin.

    make bench   (or: .venv/bin/python -m bench.profile_overhead [--rounds R] [--calls N])
    on a GPU machine with onnxruntime-gpu: python -m bench.profile_overhead --cuda

Latency, on an MLP whose profile has a few hundred Node events (ORT's default optimizations
fuse each MatMul+Add+Relu layer into one FusedGemm node on CPU; into Gemm and Relu on CUDA:
twice the events), timed on a request thread that did
not create the sessions, as in a server. Each iteration times these calls in random order,
each after an untimed unprofiled run (settling the caches as in service), so the machine's
drift hits them alike; differences are taken per iteration and their median reported:
  C API                 ``CSession.run(feeds)``, a C-API session configured as the twin
  C API profiled        the same with ``profile_prefix``: ORT's cost = the difference
  C API profiled, idle  the same on a second C-API session that, like the twin, runs only
                        these profiled calls, each after a run of the user's session: ORT's cost
                        in the twin's state (the caches hold the other session's weights and
                        code, its pool thread has slept since its last run)
  otel-ort              instrumented ``InferenceSession.run``, not profiled
  otel-ort profiled     the same, selected by the sampler, which (as Ratio and EveryNth do) knew
                        it one run ahead: the untimed run before it warmed the twin
  otel-ort forced       the same inside ``profile_next_run()``: nothing knew it ahead
  otel-ort after C API  ``InferenceSession.run``, not profiled, right after a run of the C-API
                        session: what the user's session pays after a run on the twin
and, untimed by ``timed`` but timed too, the run before "otel-ort profiled" (the warm-up, on the
twin) and the one before "otel-ort forced" (on the user's session).
Ours = otel-ort profiled - otel-ort: how much longer the caller waits. Target: ours <= ORT's
+ 0.3 ms. Both profile modes are measured, one after the other: "twin" (the default: the user's
session runs the unprofiled runs but the one before a run the sampler expects to profile, so
the twin's caches are cold for a forced run) and "serve" (the twin runs every unprofiled run,
so it is warm). The profiler's worker converts
each profiled run in the background: "worker idle" calls ``flush_profiles()`` before every timed
call, outside the timer; "worker busy" does not, so conversions run during the timed calls and,
with few cores, compete with them for CPU.

Memory: the resident set (VmRSS) before and after the twin of a bigger model is built, next to
the model's weight bytes and to what the user's own InferenceSession added; with ``--cuda``,
the GPU's memory in use too (nvidia-smi: every process on its GPU 0, so make that the GPU
CUDA uses, and run nothing else there).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanContext

from bench.run_overhead import NullExporter, median_diff_us, median_us
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run, semconv
from otel_ort.capi import CSession, load_api
from otel_ort.demo_model import mlp_model
from otel_ort.profiling import read_profile
from otel_ort.profiling.twin import twin_config
from otel_ort.sampling import ProfileSampler
from otel_ort.tables import format_table

TARGET_MS = 0.3
C_PLAIN, C_PROFILED, C_IDLE = "C API", "C API profiled", "C API profiled, idle"
OURS_PLAIN, OURS_PROFILED, OURS_FORCED = "otel-ort", "otel-ort profiled", "otel-ort forced"
OURS_AFTER_C = "otel-ort after C API"
WARM_UP, BEFORE_FORCED = "warm-up (before otel-ort profiled)", "before otel-ort forced"
VARIANTS = ("worker idle", "worker busy")
MODES = ("twin", "serve")
MIB = 1024 * 1024
CPU = ["CPUExecutionProvider"]
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


class Scripted(ProfileSampler):
    """Profiles the runs the bench announces with ``next_profiled``, and knows each one run
    ahead, as ``Ratio`` (drawing one run ahead) and ``EveryNth`` (counting) do."""

    def __init__(self) -> None:
        self._decisions: list[bool] = []

    def next_profiled(self) -> None:
        """The next run is not profiled, the one after it is."""
        self._decisions = [False, True]

    def should_profile(self, span_context: SpanContext) -> bool:
        return self._decisions.pop(0) if self._decisions else False

    def profiles_next(self, span_context: SpanContext) -> bool:
        return bool(self._decisions and self._decisions[0])


def rss() -> int:
    """This process's resident set size in bytes (VmRSS)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def gpu_used() -> int:
    """GPU 0's memory in use, by every process, in bytes (nvidia-smi)."""
    query = ["nvidia-smi", "-i", "0", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    return int(subprocess.run(query, capture_output=True, text=True, check=True).stdout) * MIB


def timed(
    calls: dict[str, Callable[[], object]], iterations: int, settle: Callable[[str], object]
) -> dict[str, list[int]]:
    """Time each call once per iteration in a random order, ``settle(name)`` untimed before
    each; ns per call, per name. (Random, not rotating: a conversion running in the background
    after a profiled call must not always land on the same next call.)"""
    clock = time.perf_counter_ns
    order = random.Random(0)
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(iterations):
        for name in order.sample(list(calls), len(calls)):
            settle(name)
            t0 = clock()
            calls[name]()
            samples[name].append(clock() - t0)
    return samples


def outcomes(reader: InMemoryMetricReader) -> Counter[str]:
    """Runs selected for profiling so far, by outcome (``profiled`` or the skip reason)."""
    counts: Counter[str] = Counter()
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == semconv.METRIC_PROFILE_RUNS:
                    for point in metric.data.data_points:
                        outcome = (point.attributes or {}).get(semconv.PROFILE_OUTCOME)
                        counts[str(outcome)] += int(getattr(point, "value", 0))
    return counts


def write_model(directory: Path, width: int, depth: int) -> Path:
    path = directory / f"mlp_{width}x{depth}.onnx"
    path.write_bytes(mlp_model(width=width, depth=depth))
    return path


def measure_latency(
    args: argparse.Namespace, workdir: Path, reader: InMemoryMetricReader, sampler: Scripted
):
    """Samples per variant and call name; the profiled run's Node event count; outcomes."""
    model = write_model(workdir, args.width, args.depth)
    feeds = {"x": np.random.default_rng(0).standard_normal((args.batch, args.width), np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(model, options, providers=CUDA if args.cuda else CPU)
    c_session = CSession(twin_config(session))  # the twin's own configuration
    c_idle = CSession(twin_config(session))  # runs C_IDLE only, as the twin runs profiled runs
    c_dir = workdir / "c-api"
    c_dir.mkdir()
    numbers = itertools.count()

    def forced_ours() -> object:
        with profile_next_run():
            return session.run(None, feeds)

    calls: dict[str, Callable[[], object]] = {
        C_PLAIN: lambda: c_session.run(feeds),
        C_PROFILED: lambda: c_session.run(feeds, profile_prefix=f"{c_dir}/{next(numbers)}"),
        C_IDLE: lambda: c_idle.run(feeds, profile_prefix=f"{c_dir}/{next(numbers)}"),
        OURS_PLAIN: lambda: session.run(None, feeds),
        OURS_PROFILED: lambda: session.run(None, feeds),  # the sampler selects it
        OURS_FORCED: forced_ours,
        OURS_AFTER_C: lambda: session.run(None, feeds),
    }
    # what runs untimed before each call; before C_IDLE, the user's session: its caches then
    # hold the user's weights, not the C session's, as they hold them when the twin runs
    plain_of = {
        name: calls[C_PLAIN if name in (C_PLAIN, C_PROFILED, OURS_AFTER_C) else OURS_PLAIN]
        for name in calls
    }
    befores = {OURS_PROFILED: WARM_UP, OURS_FORCED: BEFORE_FORCED}
    before_samples: dict[str, list[int]] = {WARM_UP: [], BEFORE_FORCED: []}

    def settle(name: str, flush: bool) -> None:
        if flush:
            flush_profiles()
        if name == OURS_PROFILED:
            sampler.next_profiled()
        t0 = time.perf_counter_ns()
        plain_of[name]()  # as in service: ordinary runs come before a profiled one
        if name in befores:
            before_samples[befores[name]].append(time.perf_counter_ns() - t0)

    def rounds() -> tuple[dict[str, dict[str, list[int]]], int, dict[str, Counter[str]]]:
        forced_ours()  # builds and primes the twin in the worker
        flush_profiles()
        timed(calls, 20, lambda name: settle(name, True))  # warm-up, first profiled runs too
        events = len(read_profile(min(glob.glob(f"{c_dir}/*.json"))).runs[0].nodes)
        samples: dict[str, dict[str, list[int]]] = {variant: {} for variant in VARIANTS}
        counts: dict[str, Counter[str]] = {variant: Counter() for variant in VARIANTS}
        for done in range(args.rounds):
            for variant in VARIANTS:
                flush_profiles()
                before = outcomes(reader)
                flushing = partial(settle, flush=variant == "worker idle")
                for values in before_samples.values():
                    values.clear()
                measured = timed(calls, args.calls, flushing) | before_samples
                for name, values in measured.items():
                    samples[variant].setdefault(name, []).extend(values)
                flush_profiles()
                counts[variant] += outcomes(reader) - before
                for path in glob.glob(f"{c_dir}/*.json"):
                    os.unlink(path)
            print(f"\rround {done + 1}/{args.rounds}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        return samples, events, counts

    try:
        if args.same_thread:
            return rounds()
        with ThreadPoolExecutor(1, thread_name_prefix="request") as request_thread:
            return request_thread.submit(rounds).result()  # as in a server
    finally:
        c_session.close()
        c_idle.close()


def measure_memory(workdir: Path, width: int, depth: int, cuda: bool) -> list[tuple[str, ...]]:
    """Rows: what was added to the resident set (and the GPU's memory), in MiB and relative to
    the weights."""
    model = write_model(workdir, width, depth)
    weights = depth * (width * width + width) * 4
    feeds = {"x": np.ones((8, width), np.float32)}
    gauges = [rss, gpu_used] if cuda else [rss]
    steps = [[gauge() for gauge in gauges]]

    def step() -> None:
        flush_profiles()
        steps.append([gauge() for gauge in gauges])

    session = ort.InferenceSession(model, providers=CUDA if cuda else CPU)
    session.run(None, feeds)
    step()
    with profile_next_run():
        session.run(None, feeds)  # asks the worker to build the twin and prime it
    step()
    with profile_next_run():
        session.run(None, feeds)  # one profiled run on the twin, converted
    step()
    labels = [
        "user's InferenceSession, created + 1 run",
        "twin, built + primed (1 profiled run)",
        "one more profiled run, converted",
    ]
    added = [
        [after - before for before, after in zip(*pair, strict=True)]
        for pair in itertools.pairwise(steps)
    ]
    rows = [("model weights (float32)", [weights] * len(gauges)), *zip(labels, added, strict=True)]
    return [
        (label, *(f"{size / MIB:.1f}" for size in sizes), f"{sizes[0] / weights:.2f}")
        for label, sizes in rows
    ]


def extra_ms(
    samples: dict[str, list[int]], profiled: str, base: str, ours: str = OURS_PROFILED
) -> float:
    """Median over iterations of (``ours`` - otel-ort) - (``profiled`` - ``base``)."""
    return (
        statistics.median(
            (ours_profiled - plain) - (other_profiled - other)
            for ours_profiled, plain, other_profiled, other in zip(
                samples[ours], samples[OURS_PLAIN], samples[profiled], samples[base], strict=True
            )
        )
        / 1e6
    )


def variant_rows(samples: dict[str, list[int]], counts: Counter[str]) -> dict[str, str]:
    """The table's column for one variant: label -> value."""
    column = {f"{name} run": f"{median_us(samples[name]) / 1000:.3f}" for name in samples}
    ort_cost = median_diff_us(samples[C_PROFILED], samples[C_PLAIN]) / 1000
    idle_cost = median_diff_us(samples[C_IDLE], samples[C_PLAIN]) / 1000
    ours = median_diff_us(samples[OURS_PROFILED], samples[OURS_PLAIN]) / 1000
    extra = extra_ms(samples, C_PROFILED, C_PLAIN)
    column.update({
        "ORT's profiling cost (C API profiled - C API)": f"{ort_cost:.3f}",
        "same, on an idle session (C API profiled, idle - C API)": f"{idle_cost:.3f}",
        "ours (otel-ort profiled - otel-ort)": f"{ours:.3f}",
        "ours - ORT's (per iteration)": f"{extra:.3f}",
        f"target: ours - ORT's <= {TARGET_MS}": "met" if extra <= TARGET_MS else "MISSED",
        "ours / ORT's": f"{ours / ort_cost:.2f}x",
        "warm-up: the run before, on the twin (twin mode) - on the session": (
            f"{median_diff_us(samples[WARM_UP], samples[BEFORE_FORCED]) / 1000:.3f}"
        ),
        "an unprofiled run after the twin's (otel-ort after C API - otel-ort)": (
            f"{median_diff_us(samples[OURS_AFTER_C], samples[OURS_PLAIN]) / 1000:.3f}"
        ),
        "forced: ours - ORT's": f"{extra_ms(samples, C_PROFILED, C_PLAIN, OURS_FORCED):.3f}",
        "forced: ours - ORT's on an idle session": (
            f"{extra_ms(samples, C_IDLE, C_PLAIN, OURS_FORCED):.3f}"
        ),
        "runs profiled / selected": f"{counts['profiled']}/{sum(counts.values())}",
    })  # fmt: skip
    return column


NOTES = """\
Each timed call follows an untimed unprofiled run of the same session; "C API profiled, idle"
and "otel-ort forced" follow one of the user's session (the twin's weights are a second copy);
"otel-ort profiled" follows one that the sampler's hint sent to the twin, warming it.
"C API profiled, idle" runs on a second C-API session that runs nothing else, as a twin that
nothing warmed: "forced: ours - ORT's on an idle session" is what otel-ort adds to such a
twin's profiled run. In twin mode the warm-up moves the cold caches' cost from the profiled run
to the run before it ("warm-up" row), and the user's session pays for its own cold caches on the
run after ("after the twin's" row; a C-API session stands in for the twin there). In serve mode
the user's session is the twin for unprofiled runs: "otel-ort run" and the runs before and
after each profiled one execute on the twin, through the C API (both rows then compare runs on
the twin).
worker idle: flush_profiles() before each timed call, outside the timer: the worker's
conversions stay out of the timed calls.
worker busy: no flushing between iterations: conversions run during the timed calls and compete
with them for CPU ({cpus} CPUs here)."""


def latency_report(measured, node_events: int, args: argparse.Namespace) -> str:
    """``measured``: per mode, (samples, counts) per variant."""
    columns = {
        f"{mode}, {variant}": variant_rows(samples[variant], counts[variant])
        for mode, (samples, counts) in measured.items()
        for variant in VARIANTS
    }
    names = list(columns)
    rows: list[tuple[str, ...]] = [("median, ms", *names)]
    rows += [(label, *(columns[name][label] for name in names)) for label in columns[names[0]]]
    where = "the thread that made the sessions" if args.same_thread else "a request thread"
    header = (
        f"profiled vs unprofiled run{' on CUDA' if args.cuda else ''}: MLP {args.batch}x"
        f"{args.width}, depth {args.depth}, "
        f"{node_events} Node events per profiled run; {args.rounds * args.calls} iterations "
        f"per variant, timed on {where}"
    )
    return f"{header}\n\n{format_table(rows)}\n\n{NOTES.format(cpus=os.cpu_count())}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=80, help="iterations per round and variant")
    parser.add_argument("--depth", type=int, default=300, help="layers: one Node event each")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--threads", type=int, default=0, help="intra_op_num_threads (default 0: ORT's choice)"
    )
    parser.add_argument(
        "--cuda", action="store_true", help="sessions on CUDA (onnxruntime-gpu and a GPU)"
    )
    parser.add_argument(
        "--same-thread",
        action="store_true",
        help="time on the thread that made the sessions (ORT's best case; a server rarely is)",
    )
    args = parser.parse_args(argv)

    before_library = rss()
    load_api().env  # noqa: B018 (loads the C library copy and creates its OrtEnv)
    library = rss() - before_library
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=65536))
    reader = InMemoryMetricReader()
    instrumentor = OrtInstrumentor()
    sampler = Scripted()
    meter_provider = MeterProvider(metric_readers=[reader])
    measured = {}
    with tempfile.TemporaryDirectory() as temporary:
        for mode in MODES:
            workdir = Path(temporary) / mode
            workdir.mkdir()
            instrumentor.instrument(
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
                profile_sampler=sampler,
                profile_dir=str(workdir / "profiles"),
                profile_mode=mode,
            )
            print(f"profile_mode={mode}", file=sys.stderr)
            try:
                samples, node_events, counts = measure_latency(args, workdir, reader, sampler)
                measured[mode] = samples, counts
                if mode == "twin":
                    memory = measure_memory(workdir, width=1024, depth=8, cuda=args.cuda)
            finally:
                instrumentor.uninstrument()
    tracer_provider.shutdown()
    print(f"\n{latency_report(measured, node_events, args)}\n")
    print("memory added, MLP 1024 wide, 8 layers\n")
    gpu = ("GPU MiB",) if args.cuda else ()
    print(format_table([("what", "resident MiB", *gpu, "resident x weights"), *memory]))
    print(f"\nthe C API library copy and its OrtEnv, once per process: {library / MIB:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one profiled run costs the whole process in CPU, against what ORT's own run-level
profiling of the same run costs, in one process.

    make bench   (or: .venv/bin/python -m bench.profiled_run_cost [--quick] [--rounds R]
                  [--models cls,rec])

On the rapidocr classifier (235 nodes) and recogniser (415 nodes), one session each, runs made
on a request thread. Spans go over OTLP/gRPC (``otel_ort.configure``'s pipeline, metrics export
off) to a real receiver in another process (``bench.otlp_sink``), whose CPU is not counted.
The session's intra-op threads do not spin (``session.intra_op.allow_spinning=0``), so a
thread's CPU is its work. The process's CPU includes its conversion process's
(``profile_conversion="process"``, the default: read from ``/proc``). Each round measures, in
random order, the process CPU of:
  ORT           the run with instrumentation suppressed
  ORT profiled  the same given a RunOptions with run-level profiling on (ORT writes its file)
  traced        the instrumented run, not profiled, then ``flush_profiles()`` (its span sent)
  profiled      the instrumented run inside ``profile_next_run()``, then ``flush_profiles()``:
                the request thread, the worker's conversion, perf counting, the export
ORT's own = ORT profiled - ORT; ours = profiled - traced; each a median of per-round
differences. Target: ours <= 3x ORT's own. The split of ours (means of the per-round
differences, so that the parts add up) is by thread: the request thread, otel-ort's worker
(by stage: the functions ``bench.stage_timers`` hooks), the conversion process, the span
processors' export threads, and the rest (ORT's pool, gRPC's own threads). Measured with perf
counters off and with the default ones: the difference is perf's cost.

Then, with the default counters: how much the worker's conversion holds the GIL. Right after a
profiled run, the request thread makes unprofiled runs back to back until the conversion and
its export end, then as many with the worker idle; meanwhile a probe thread sleeps 1 ms in a
loop. The probe's lateness over the window is the share of it in which a thread that wanted
the GIL (and a CPU: this VM has two) waited.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort
from opentelemetry.instrumentation.utils import suppress_instrumentation

import otel_ort
from bench.otlp_sink import SinkProcess
from bench.stage_timers import Hook, StageTimers
from bench.wheel_models import (
    OCR_MODELS,
    WheelModel,
    add_model_options,
    chosen_models,
    feeds,
    fetch,
)
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run
from otel_ort.profiles.reader import read_profile
from otel_ort.profiling.run_options import Unrecognized, run_profiling_switch

MODELS = {"cls": OCR_MODELS[0], "rec": OCR_MODELS[1]}
TARGET_RATIO = 3.0
WORKER_THREAD = "otel-ort-profiler"
REQUEST_THREAD = "bench-request"
KEEP = "kept file (when converted here), retention"
HOOKS = (
    Hook("perf: read counters and rings", "otel_ort.perf.counting", "RawRun.settle"),
    Hook("convert here", "otel_ort.profiling.conversion", "convert_job"),
    Hook(
        "send to the conversion process, take its answer",
        "otel_ort.profiling.conversion_process",
        "ConversionProcess.convert",
    ),
    Hook("hand spans over", "otel_ort.export.delivery", "SpanDelivery.deliver_drafts"),
    Hook("hand spans over", "otel_ort.export.delivery", "SpanDelivery.deliver_encoded"),
    Hook(KEEP, "otel_ort.profiling.conversion_job", "publish_kept"),
    Hook(KEEP, "otel_ort.profiling.store", "ProfileStore.retain"),
)
EXPORTS = (
    Hook(
        "OTLP export",
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "OTLPSpanExporter.export",
    ),
    Hook("OTLP export", "otel_ort.export.profile_export", "ProfileExportProcessor._export"),
)
STAGES = list(dict.fromkeys(hook.label for hook in (*HOOKS, *EXPORTS)))
CALLS = ("ORT", "ORT profiled", "traced", "profiled")


@dataclass(frozen=True)
class Sample:
    """CPU nanoseconds of one call: the process with its conversion process, two threads, the
    worker's stages, the conversion process, and the OTLP exporter's ``export`` on threads
    other than those two."""

    process: int
    request: int
    worker: int
    conversion: int
    stages: dict[str, int] = field(default_factory=dict)
    export: int = 0

    @property
    def other(self) -> int:
        return self.process - self.request - self.worker - self.conversion - self.export

    @classmethod
    def of(
        cls, before: dict[str, int], after: dict[str, int], timed: dict[tuple[str, str], int]
    ) -> Sample:
        """From thread-clock snapshots around a call and the stage timers' take after it."""
        stages: dict[str, int] = defaultdict(int)
        export = 0
        for (label, thread), ns in timed.items():
            elsewhere = thread != WORKER_THREAD and not thread.startswith(REQUEST_THREAD)
            if label == EXPORTS[0].label and elsewhere:
                export += ns
            elif thread == WORKER_THREAD:
                stages[label] += ns
        return cls(
            process=after["process"] - before["process"],
            request=after["request"] - before["request"],
            worker=after["worker"] - before["worker"],
            conversion=after["conversion"] - before["conversion"],
            stages=dict(stages),
            export=export,
        )


@dataclass(frozen=True)
class GilReport:
    """Unprofiled runs' latency while the worker converts and exports, and with it idle."""

    window_ms: float
    busy_runs_ms: list[float]
    idle_runs_ms: list[float]
    busy_probe_late: float
    """The probe's lateness over the conversion windows, as a share of them."""
    idle_probe_late: float


def _thread_cpu_ns(thread: threading.Thread) -> int:
    if thread.ident is None:
        return 0
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    except (OSError, ProcessLookupError):  # it has just ended
        return 0


def _conversion_cpu_ns() -> int:
    """The conversion process's CPU so far (all its threads), ns; 0 when none runs."""
    profiler = OrtInstrumentor()._profiler
    process = profiler._converter.process if profiler is not None else None
    pid = process.pid if process is not None else None
    if pid is None:
        return 0
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])  # ns on a CPU
    except (OSError, ValueError):  # it has just ended
        return 0
    return total


def _snapshot(request: threading.Thread) -> dict[str, int]:
    """CPU now, ns: the process with its conversion process, and each role's threads."""
    conversion = _conversion_cpu_ns()
    roles = {
        "process": time.process_time_ns() + conversion,
        "request": _thread_cpu_ns(request),
        "worker": 0,
        "conversion": conversion,
    }
    for thread in threading.enumerate():
        if thread.name == WORKER_THREAD:
            roles["worker"] += _thread_cpu_ns(thread)
    return roles


def _measure(
    model: WheelModel,
    path: Path,
    perf_events: str | None,
    rounds: int,
    gil_rounds: int,
    endpoint: str,
) -> tuple[dict[str, list[Sample]], GilReport | None, list[str]]:
    """Samples per call, the GIL report (when ``gil_rounds``), hooks not found."""
    scratch = Path(tempfile.mkdtemp(prefix="otel-ort-run-cost-"))
    telemetry = otel_ort.configure(
        service_name="profiled-run-cost",
        endpoint=endpoint,
        metrics_export=False,
        set_global=False,
    )
    OrtInstrumentor().instrument(
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        profile_sampler="never",
        profile_dir=str(scratch / "kept"),
        profile_max_files=50,
        perf_events=perf_events,
    )
    switch = run_profiling_switch()
    if isinstance(switch, Unrecognized):
        raise SystemExit(f"run-level profiling is not available here: {switch.reason}")
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = feeds(session, model)
    request = threading.current_thread()
    counter = iter(range(10**9))

    def ort_run() -> None:
        with suppress_instrumentation():
            session.run(None, x)

    def ort_profiled() -> Callable[[], None]:
        run_options = ort.RunOptions()
        switch.enable(run_options, str(scratch / f"ort-{next(counter)}"))

        def run() -> None:
            with suppress_instrumentation():
                session.run(None, x, run_options)

        return run

    def traced() -> None:
        session.run(None, x)
        flush_profiles()

    def profiled() -> None:
        with profile_next_run():
            session.run(None, x)
        flush_profiles()

    makers: dict[str, Callable[[], Callable[[], None]]] = {
        "ORT": lambda: ort_run,
        "ORT profiled": ort_profiled,
        "traced": lambda: traced,
        "profiled": lambda: profiled,
    }
    for _ in range(3):
        ort_run()
    profiled()  # the session's first profiled run (it runs alone) and the layout probe
    process = OrtInstrumentor()._profiler._converter.process
    if process is not None and not process.start():  # ready before the first timed round
        raise SystemExit(f"the conversion process did not start: {process.unavailable}")
    samples: dict[str, list[Sample]] = defaultdict(list)
    with StageTimers((*HOOKS, *EXPORTS)) as timers:
        for index in range(rounds):
            order = list(CALLS)
            random.shuffle(order)
            for name in order:
                call = makers[name]()
                ort_run()  # untimed: the caches as in service
                timers.take()
                before = _snapshot(request)
                call()
                after = _snapshot(request)
                samples[name].append(Sample.of(before, after, timers.take()))
            for leftover in scratch.glob("ort-*.json"):
                leftover.unlink()
            if (index + 1) % max(1, rounds // 5) == 0:
                _progress(f"    {index + 1}/{rounds} rounds")
        hooks = (*HOOKS, *EXPORTS)
        found = {hook.label for hook in hooks if hook not in timers.missing}
        missing = sorted({hook.label for hook in hooks} - found)
    gil = _gil(session, x, gil_rounds) if gil_rounds else None
    OrtInstrumentor().uninstrument()
    telemetry.shutdown()
    return samples, gil, missing


def _gil(session: ort.InferenceSession, x: object, rounds: int) -> GilReport:
    busy_runs: list[float] = []
    idle_runs: list[float] = []
    busy = {"late": 0.0, "window": 0.0}
    idle = {"late": 0.0, "window": 0.0}
    window_ms: list[float] = []
    for _ in range(rounds):
        with profile_next_run():
            session.run(None, x)
        done = threading.Event()
        threading.Thread(target=_flush_then_set, args=(done,), daemon=True).start()
        start = time.perf_counter()
        with _Probe() as probe:
            while not done.is_set():
                busy_runs.append(_timed_run(session, x))
        window_ms.append(1000 * (time.perf_counter() - start))
        busy["late"] += probe.late
        busy["window"] += probe.window
        count = len(busy_runs) - len(idle_runs)
        with _Probe() as probe:
            for _ in range(max(1, count)):
                idle_runs.append(_timed_run(session, x))
        flush_profiles()
        idle["late"] += probe.late
        idle["window"] += probe.window
    return GilReport(
        statistics.median(window_ms),
        busy_runs,
        idle_runs,
        busy["late"] / max(busy["window"], 1e-9),
        idle["late"] / max(idle["window"], 1e-9),
    )


def _flush_then_set(done: threading.Event) -> None:
    flush_profiles()
    done.set()


def _timed_run(session: ort.InferenceSession, x: object) -> float:
    start = time.perf_counter()
    session.run(None, x)
    return 1000 * (time.perf_counter() - start)


class _Probe:
    """A thread sleeping 1 ms at a time; ``late``: seconds it woke later than asked."""

    SLEEP_S = 0.001

    def __init__(self) -> None:
        self.late = 0.0
        self.window = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        begin = time.perf_counter()
        while not self._stop.is_set():
            start = time.perf_counter()
            time.sleep(self.SLEEP_S)
            self.late += max(0.0, time.perf_counter() - start - self.SLEEP_S)
        self.window = time.perf_counter() - begin

    def __enter__(self) -> _Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _median_ms(samples: dict[str, list[Sample]], name: str, base: str) -> float:
    pairs = zip(samples[name], samples[base], strict=True)
    return statistics.median(a.process - b.process for a, b in pairs) / 1e6


def _mean_ms(values: list[int]) -> float:
    return statistics.fmean(values) / 1e6


def _split(samples: dict[str, list[Sample]]) -> list[tuple[str, float]]:
    """Mean per-round difference profiled - traced, by thread role and worker stage, ms."""
    pairs = list(zip(samples["profiled"], samples["traced"], strict=True))
    parts = [
        ("request thread", _mean_ms([a.request - b.request for a, b in pairs])),
        ("worker, all", _mean_ms([a.worker - b.worker for a, b in pairs])),
    ]
    labels = STAGES
    staged = [_mean_ms([a.stages.get(label, 0) for a, _ in pairs]) for label in labels]
    parts += [(f"  worker: {label}", ms) for label, ms in zip(labels, staged, strict=True)]
    parts.append(("  worker: the rest", parts[1][1] - sum(staged)))
    parts.append(("conversion process", _mean_ms([a.conversion - b.conversion for a, b in pairs])))
    parts.append(("OTLP export, other threads", _mean_ms([a.export - b.export for a, b in pairs])))
    parts.append(
        (
            "the rest: ORT pool, gRPC core, flush threads",
            _mean_ms([a.other - b.other for a, b in pairs]),
        )
    )
    parts.append(
        (
            "whole process, its conversion process's CPU included (mean)",
            _mean_ms([a.process - b.process for a, b in pairs]),
        )
    )
    return parts


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _nodes(path: Path, model: WheelModel) -> int:
    """Nodes in one run-level profile of the model (ORT's nodes, after its fusions)."""
    switch = run_profiling_switch()
    assert not isinstance(switch, Unrecognized)
    scratch = Path(tempfile.mkdtemp(prefix="otel-ort-nodes-"))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    run_options = ort.RunOptions()
    switch.enable(run_options, str(scratch / "count"))
    session.run(None, feeds(session, model), run_options)
    (profile,) = scratch.glob("count*.json")
    return len(read_profile(profile).runs[0].nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 rounds, 4 GIL rounds")
    parser.add_argument("--rounds", type=int, default=None, help="default 40")
    parser.add_argument("--gil-rounds", type=int, default=None, help="default 10")
    add_model_options(parser, MODELS)
    args = parser.parse_args()
    rounds = args.rounds or (12 if args.quick else 40)
    gil_rounds = args.gil_rounds if args.gil_rounds is not None else (4 if args.quick else 10)
    keys = chosen_models(parser, args.models, MODELS)
    if rounds < 1 or gil_rounds < 0:
        parser.error("--rounds must be at least 1 and --gil-rounds at least 0")
    _progress(f"profiled_run_cost: {rounds} rounds per model and perf setting, {time.ctime()}")
    headline, splits, gils, missing, warnings = [], [], [], set(), []
    with SinkProcess(1) as sink, ThreadPoolExecutor(1, REQUEST_THREAD) as request_thread:
        for key in keys:
            model = MODELS[key]
            path = fetch(model, args.cache)
            nodes = request_thread.submit(_nodes, path, model).result()
            split_columns: list[list[tuple[str, float]]] = []
            for perf_events, label in (("off", "off"), (None, "default")):
                _progress(f"  {model.name}, perf {label}:")
                phase_gil_rounds = gil_rounds if perf_events is None else 0
                start = sink.received()[0]
                samples, gil, lost = request_thread.submit(
                    _measure,
                    model,
                    path,
                    perf_events,
                    rounds,
                    phase_gil_rounds,
                    sink.endpoints[0],
                ).result()
                missing.update(lost)
                end = sink.received()[0]
                node_spans = end.spans - start.spans - (end.run_spans - start.run_spans)
                per_run = node_spans / (rounds + 1 + phase_gil_rounds)  # +1: the warm-up's
                if abs(per_run - nodes) > 0.5:
                    warnings.append(
                        f"{model.name}, perf {label}: the receiver got {per_run:.1f} node spans "
                        f"per profiled run, not {nodes}: conversion or export failed, so these "
                        "figures do not measure a working pipeline"
                    )
                theirs = _median_ms(samples, "ORT profiled", "ORT")
                ours = _median_ms(samples, "profiled", "traced")
                run_ms = statistics.median(s.process for s in samples["ORT"]) / 1e6
                ratio = ours / theirs if theirs > 0 else float("inf")
                cells = (
                    model.name,
                    str(nodes),
                    label,
                    f"{run_ms:.1f}",
                    f"{theirs:.1f}",
                    f"{1000 * theirs / nodes:.0f}",
                    f"{ours:.1f}",
                    f"{1000 * ours / nodes:.0f}",
                    f"{ratio:.1f}x",
                    "met" if ratio <= TARGET_RATIO else "missed",
                    f"{per_run:.0f}",
                )
                headline.append("| " + " | ".join(cells) + " |")
                split_columns.append(_split(samples))
                if gil is not None:
                    gils.append((model.name, gil))
            off, on = split_columns
            for (part, off_ms), (_, on_ms) in zip(off, on, strict=True):
                splits.append(f"| {model.name} | {part} | {off_ms:.2f} | {on_ms:.2f} |")
    print(
        f"\nprofiled_run_cost, {time.strftime('%Y-%m-%d')}: process CPU per run, "
        f"medians of per-round differences over {rounds} rounds"
    )
    print(
        "| model | nodes | perf | ORT run ms | ORT's own profiling ms | us/node | ours ms "
        "| us/node | ours / ORT's | target (<= 3x) | node spans received per profiled run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(headline))
    print("\nwhere ours goes: profiled - traced, CPU ms, mean over rounds (perf off | default)")
    print("| model | part | perf off | perf default |")
    print("|---|---|---|---|")
    print("\n".join(splits))
    if missing:
        print(f"\nstages not timed (their functions moved): {', '.join(sorted(missing))}")
    for warning in warnings:
        print(f"\nWARNING: {warning}")
    if gils:
        print(
            "\nthe worker and the GIL (perf default): unprofiled runs on the request thread "
            "while a profiled run is converted and exported, and with the worker idle"
        )
        print(
            "| model | window ms | run p50 busy / idle ms | run max busy / idle ms "
            "| probe late, busy / idle |"
        )
        print("|---|---|---|---|---|")
        for name, gil in gils:
            print(
                f"| {name} | {gil.window_ms:.0f} "
                f"| {statistics.median(gil.busy_runs_ms):.1f} / "
                f"{statistics.median(gil.idle_runs_ms):.1f} "
                f"| {max(gil.busy_runs_ms):.1f} / {max(gil.idle_runs_ms):.1f} "
                f"| {100 * gil.busy_probe_late:.0f} % / {100 * gil.idle_probe_late:.0f} % |"
            )


if __name__ == "__main__":
    main()

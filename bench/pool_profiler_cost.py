"""What ORT's thread-pool profiler costs the unprofiled runs of a session once it has been
profiled: the CPU and wall time of a run, in processes whose session was profiled once,
against processes whose session never was.

    python -m bench.pool_profiler_cost [--models cls,rec] [--rounds 6] [--threads 4]
                                       [--seconds 2] [--spinning] [--cache DIR]

After a session's first profiled run, ORT's thread-pool profiler stays on for that session:
each later run logs its parallel sections (see docs/profiling.md). Each measurement is a
process of its own: it instruments ORT (sampler ``never``, perf off, profiles converted on
the worker thread, so that no conversion process starts beside the timed runs), opens the model
(the rapidocr classifier and recogniser), warms it up, profiles one run
(``profile_next_run``) or not, then runs the session from ``--threads`` threads at once for
about ``--seconds`` and reports the process's CPU and the wall time per run. The two kinds
alternate (ABBA) for ``--rounds`` pairs; the change is the median of the pairs' ratios,
with their range. ORT's threads wait for work without spinning unless ``--spinning``, as in
``bench.service_load`` and the FastAPI example: spinning threads make a process's CPU a
measure of waiting, not of work.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.wheel_models import OCR_MODELS, add_model_options, chosen_models, fetch

MODELS = {"cls": OCR_MODELS[0], "rec": OCR_MODELS[1]}
KINDS = ("never profiled", "profiled once")


@dataclass(frozen=True)
class Sample:
    """One process's runs: CPU (all its threads) and wall time per run, ms."""

    cpu_ms: float
    wall_ms: float


def run_once(
    key: str, path: Path, profiled: bool, threads: int, seconds: float, spin: bool
) -> Sample:
    """In this process: the session's runs from ``threads`` threads, after one profiled run
    when ``profiled``."""
    import onnxruntime as ort
    from opentelemetry.sdk.trace import TracerProvider

    from bench.wheel_models import feeds
    from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run

    directory = tempfile.TemporaryDirectory(prefix="otel-ort-pool-cost-")
    OrtInstrumentor().instrument(
        tracer_provider=TracerProvider(),
        profile_sampler="never",
        profile_dir=directory.name,
        perf_events="off",
        profile_conversion="thread",  # no conversion process starting beside the timed runs
    )
    options = ort.SessionOptions()
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs = feeds(session, MODELS[key])
    start = time.perf_counter()
    for _ in range(20):
        session.run(None, inputs)
    per_run = (time.perf_counter() - start) / 20
    if profiled:
        with profile_next_run():
            session.run(None, inputs)
        if not flush_profiles(timeout=60):
            raise SystemExit("the profiled run was not converted within 60 s")
    runs = max(5, round(seconds / per_run))  # per thread: about ``seconds`` in all

    def work() -> None:
        for _ in range(runs):
            session.run(None, inputs)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    total = runs * threads
    OrtInstrumentor().uninstrument()
    directory.cleanup()
    return Sample(1e3 * cpu / total, 1e3 * wall / total)


def sample(key: str, path: Path, profiled: bool, args: argparse.Namespace) -> Sample:
    """``run_once`` in a new process."""
    command = [
        sys.executable,
        "-m",
        "bench.pool_profiler_cost",
        "--one",
        json.dumps([key, str(path), profiled]),
        "--threads",
        str(args.threads),
        "--seconds",
        str(args.seconds),
        *(["--spinning"] if args.spinning else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a measuring process failed:\n{done.stderr}")
    return Sample(**json.loads(done.stdout.strip().splitlines()[-1]))


def change(pairs: list[tuple[Sample, Sample]], field: str) -> str:
    """The median change of ``field`` from ``never profiled`` to ``profiled once``, %, with
    the range over pairs."""
    ratios = [getattr(once, field) / getattr(never, field) - 1 for never, once in pairs]
    median = statistics.median(ratios)
    return f"{100 * median:+.1f} % [{100 * min(ratios):+.1f}, {100 * max(ratios):+.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="ABBA pairs of processes")
    parser.add_argument("--threads", type=int, default=4, help="threads running the session")
    parser.add_argument("--seconds", type=float, default=2.0, help="of runs per process")
    parser.add_argument(
        "--spinning",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="ORT's threads spin for work (default: they do not)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    add_model_options(parser, MODELS)
    args = parser.parse_args(argv)
    if args.one:
        key, path, profiled = json.loads(args.one)
        one = run_once(key, Path(path), profiled, args.threads, args.seconds, args.spinning)
        print(json.dumps({"cpu_ms": one.cpu_ms, "wall_ms": one.wall_ms}))
        return 0
    if args.rounds < 1 or args.threads < 1 or args.seconds <= 0:
        parser.error("--rounds and --threads must be at least 1, --seconds above 0")
    keys = chosen_models(parser, args.models, MODELS)
    spinning = "on" if args.spinning else "off"
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    rows = []
    for key in keys:
        path = fetch(MODELS[key], args.cache)
        pairs: list[tuple[Sample, Sample]] = []
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            got = {profiled: sample(key, path, profiled, args) for profiled in order}
            pairs.append((got[False], got[True]))
            print(
                f"  {key} {round_ + 1}/{args.rounds}: CPU/run {got[False].cpu_ms:.3f} -> "
                f"{got[True].cpu_ms:.3f} ms, wall/run {got[False].wall_ms:.3f} -> "
                f"{got[True].wall_ms:.3f} ms",
                file=sys.stderr,
                flush=True,
            )
        never = statistics.median(p[0].cpu_ms for p in pairs)
        once = statistics.median(p[1].cpu_ms for p in pairs)
        rows.append(
            f"| {MODELS[key].name} | {never:.3f} | {once:.3f} | {change(pairs, 'cpu_ms')} "
            f"| {change(pairs, 'wall_ms')} |"
        )
    print(
        f"\npool_profiler_cost, {started} UTC: {args.rounds} ABBA pairs of processes, "
        f"{args.threads} threads each, ORT's spinning {spinning}; medians (range over pairs)"
    )
    print(f"| model | CPU per run, {KINDS[0]}, ms | {KINDS[1]}, ms | CPU per run | wall per run |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What ORT's thread-pool profiler costs the unprofiled runs of a session once it has been
profiled, against a twin session that never was, in one process.

    python -m bench.pool_profiler_cost [--rounds 25] [--calls 20] [--cache DIR]

After a session's first profiled run, ORT's thread-pool profiler stays on for that session:
each later run logs its parallel sections (see docs/profiling.md). Two sessions of the same
real model (the rapidocr classifier and recogniser) run in turn on this thread, ``--calls``
runs each per round; the CPU of the whole process per run is compared as a ratio, session
``a`` over session ``b``, median over ``--rounds`` rounds. Then ``a`` has one profiled run
(``profile_next_run``) and the rounds are measured again. The change in the ratio is what
the pool profiler left on costs a run (the ratio before shows the noise). perf counting is
off, so that only ORT's profiler differs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider

from bench.wheel_models import OCR_MODELS, WheelModel, feeds, fetch
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run


def _cpu_ms(session: ort.InferenceSession, inputs: Mapping[str, object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        session.run(None, inputs)
    return (time.process_time() - start) / calls * 1e3


def measure(model: WheelModel, path: Path, rounds: int, calls: int) -> tuple[float, float]:
    """The ratio a/b of CPU per run before and after ``a``'s one profiled run."""
    a = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = feeds(a, model)
    for session in (a, b):
        for _ in range(3 * calls):
            session.run(None, inputs)

    def ratio() -> float:
        return statistics.median(
            _cpu_ms(a, inputs, calls) / _cpu_ms(b, inputs, calls) for _ in range(rounds)
        )

    before = ratio()
    with profile_next_run():
        a.run(None, inputs)
    if not flush_profiles(timeout=60):
        raise SystemExit("the profiled run was not converted within 60 s")
    return before, ratio()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "otel-ort-wheels"))
    args = parser.parse_args(argv)
    OrtInstrumentor().instrument(
        tracer_provider=TracerProvider(), profile_dir=tempfile.mkdtemp(), perf_events="off"
    )
    rows = []
    for model in OCR_MODELS[:2]:
        print(f"pool_profiler_cost: {model.name} ...", file=sys.stderr, flush=True)
        before, after = measure(model, fetch(model, Path(args.cache)), args.rounds, args.calls)
        rows.append((model.name, before, after))
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(f"\npool_profiler_cost, {when} UTC: CPU per run, session a / its twin b")
    print("| model | before a's profiled run | after | change |")
    print("|---|---|---|---|")
    for name, before, after in rows:
        print(f"| {name} | {before:.3f} | {after:.3f} | {100 * (after / before - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

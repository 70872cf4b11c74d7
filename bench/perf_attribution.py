"""What perf counting costs the profile worker per node, by stage, on real counted runs.

    .venv/bin/python -m bench.perf_attribution [--runs N] [--repeats R] [--model rec]

Makes ``--runs`` real counted runs of a rapidocr model (ORT's run-level profiling on, the
default perf events on the calling thread and the session's intra-op threads, as the profiler
counts them), settles them (the rings read: not timed here), then times, ``--repeats`` times
each on every run, the stages the worker runs for one counted run:
  attribute        ``PerfCounters.attribute``: parse the rings, place and attribute per node
  node attributes  ``report.node_attributes``: the node spans' perf attributes
  run attributes   ``report.run_attributes``
  tracks           ``ProfileCounts.track_text()``: the kept file's counter tracks (JSON text)
  count_profile    the whole ``report.count_profile`` (the first three), then its tracks
Each stage: the median over runs and repeats of thread CPU µs per node (a bench measured in
one process against itself: compare figures across code versions only from the same machine
and session). ``--digest`` prints a hash of everything the stages give (node and run
attributes, tracks, in order) for each run, so that two versions of the code can be checked to
give identical values on the same saved input (``--save``/``--load`` a pickle of the settled
runs and profiles).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import onnxruntime as ort

from bench.wheel_models import OCR_MODELS, feeds, fetch
from otel_ort.instrumentation.options import PerfOptions
from otel_ort.perf.counting import PerfCounters, Pool, RawRun, Share, ThreadRaw
from otel_ort.perf.report import count_profile, node_attributes, run_attributes
from otel_ort.profiles.reader import read_profile
from otel_ort.profiles.records import Profile
from otel_ort.profiling.run_options import Unrecognized, run_profiling_switch
from otel_ort.profiling.session_runs import live_thread_ids, note_pool_threads, pool_threads

MODELS = {"cls": OCR_MODELS[0], "rec": OCR_MODELS[1]}
STAGES = ("attribute", "node attributes", "run attributes", "tracks", "count_profile + tracks")


@dataclass
class CountedRun:
    """A settled counted run and its profile (``start_ns`` as read, before any move)."""

    threads: tuple[ThreadRaw, ...]
    problems: tuple[str, ...]
    calling_tid: int | None
    profile: Profile

    def raw(self) -> RawRun:
        """A ``RawRun`` already settled (its one share holds the settled threads)."""
        share = Share(Pool([], []), [], [], settled=(self.threads, self.problems))
        return RawRun((share,), (), self.calling_tid)

    def fresh_profile(self) -> Profile:
        """The profile with its start as read (``count_profile`` moves it)."""
        profile = self.profile
        return Profile(
            profile.path,
            profile.runs,
            self.start_ns,
            profile.start_source,
            profile.event_count,
            profile.truncated,
            profile.problems,
            profile.events,
        )

    def __post_init__(self) -> None:
        self.start_ns = self.profile.start_ns


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _counted_runs(model_key: str, runs: int, cache: Path) -> tuple[PerfCounters, list[CountedRun]]:
    model = MODELS[model_key]
    path = fetch(model, cache)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    before = live_thread_ids()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    note_pool_threads(session, before)
    switch = run_profiling_switch()
    if isinstance(switch, Unrecognized):
        raise SystemExit(f"run-level profiling is not available here: {switch.reason}")
    defaults = PerfOptions()
    perf = PerfCounters(defaults.events, defaults.period_ns, False)
    if not perf.prepare(quiet=True):
        raise SystemExit(f"perf counters are off here: {perf.unavailable}")
    pool = perf.pool(pool_threads(session) or ())
    x = feeds(session, model)
    scratch = Path(tempfile.mkdtemp(prefix="otel-ort-perf-attribution-"))
    made: list[CountedRun] = []
    for index in range(runs + 1):  # the first: the session's first profiled run, left out
        session.run(None, x)  # untimed: the caches as in service
        run_options = ort.RunOptions()
        switch.enable(run_options, str(scratch / f"run{index}"))
        counting = perf.begin(pool)
        if isinstance(counting, str):
            raise SystemExit(f"perf counting did not start: {counting}")
        start = time.time_ns()
        try:
            session.run(None, x, run_options)
        finally:
            raw = perf.end(counting, caller_runs_nodes=True)
        if isinstance(raw, str):
            raise SystemExit(f"perf counting did not stop: {raw}")
        threads, problems = raw.settle()
        profile = read_profile(next(scratch.glob(f"run{index}_*.json")), start)
        if index:
            made.append(CountedRun(threads, problems, raw.calling_tid, profile))
    pool.close()
    return perf, made


T = TypeVar("T")


def _timed(call: Callable[[], T]) -> tuple[float, T]:
    """Thread CPU µs of ``call()``, and what it returned."""
    start = time.thread_time_ns()
    result = call()
    return (time.thread_time_ns() - start) / 1000, result


def _digest(perf: PerfCounters, run: CountedRun) -> str:
    counts = count_profile(perf.settled(run.raw()), run.fresh_profile())
    text = repr((counts.run, counts.nodes, counts.problems, counts.tracks()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stage_us(perf: PerfCounters, run: CountedRun) -> dict[str, float]:
    """Thread CPU µs of each stage, once, on ``run``."""
    windows = [
        (run.start_ns + int(node.ts * 1000), run.start_ns + int(node.end * 1000))
        for node in run.profile.runs[0].nodes
    ]
    raw = run.raw()
    us, counts = _timed(lambda: perf.settled(raw).attribute(windows))
    times = {"attribute": us}
    times["node attributes"] = _timed(lambda: node_attributes(counts))[0]
    times["run attributes"] = _timed(lambda: run_attributes(counts, perf.unavailable_events))[0]
    times["tracks"] = _timed(count_profile(perf.settled(raw), run.fresh_profile()).track_text)[0]
    times["count_profile + tracks"] = _timed(
        lambda: count_profile(perf.settled(raw), run.fresh_profile()).track_text()
    )[0]
    return times


def _time(perf: PerfCounters, runs: list[CountedRun], repeats: int) -> dict[str, list[float]]:
    """µs per node of each stage, once per run and repeat."""
    per_node: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for repeat in range(repeats):
        for run in runs:
            nodes = len(run.profile.runs[0].nodes)
            for stage, us in _stage_us(perf, run).items():
                per_node[stage].append(us / nodes)
        _progress(f"  repeat {repeat + 1}/{repeats}")
    return per_node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="rec", choices=sorted(MODELS))
    parser.add_argument("--runs", type=int, default=8, help="counted runs (default 8)")
    parser.add_argument("--repeats", type=int, default=15, help="per run (default 15)")
    parser.add_argument("--digest", action="store_true", help="print each run's output hash")
    parser.add_argument("--save", type=Path, help="pickle the counted runs here")
    parser.add_argument("--load", type=Path, help="use runs pickled by --save")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("OTEL_ORT_WHEEL_CACHE", "/tmp/otel-ort-wheels")),
    )
    args = parser.parse_args()
    if args.runs < 1 or args.repeats < 1:
        parser.error("--runs and --repeats must be at least 1")
    threading.current_thread().name = "bench-worker"
    if args.load:
        with args.load.open("rb") as file:
            events, runs = pickle.load(file)
        defaults = PerfOptions()
        perf = PerfCounters(defaults.events, defaults.period_ns, False)
        perf.prepare(quiet=True)
        _progress(f"perf_attribution: {len(runs)} runs loaded from {args.load} ({events})")
    else:
        _progress(f"perf_attribution: {args.runs} counted runs of {args.model}, {time.ctime()}")
        perf, runs = _counted_runs(args.model, args.runs, args.cache)
        if args.save:
            with args.save.open("wb") as file:
                pickle.dump((perf.counted_aliases, runs), file)
    if args.digest:
        for index, run in enumerate(runs):
            print(f"run {index}: {_digest(perf, run)}")
    per_node = _time(perf, runs, args.repeats)
    nodes = statistics.median(len(run.profile.runs[0].nodes) for run in runs)
    threads = statistics.median(len(run.threads) for run in runs)
    print(
        f"\n{len(runs)} counted runs of {nodes:.0f} nodes on {threads:.0f} threads, "
        f"events {', '.join(perf.counted_aliases)}; {args.repeats} repeats; {time.ctime()}"
    )
    print(f"{'stage':<24} {'us per node (median)':>21} {'ms per run':>11}")
    for stage in STAGES:
        median = statistics.median(per_node[stage])
        print(f"{stage:<24} {median:>21.2f} {median * nodes / 1000:>11.2f}")


if __name__ == "__main__":
    main()

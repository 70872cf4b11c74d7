"""10,000 instrumented runs exporting to a closed OTLP endpoint; prints one JSON line of results.

Run as a script (``python -m tests.helpers.dead_collector PORT PROFILE_DIR``) by the e2e stage: the
pipeline must be the process's global one, set up once, as in a user's service.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time

import numpy as np
import onnxruntime as ort

import otel_ort
from otel_ort import OrtInstrumentor
from otel_ort.demo_model import mlp_model

RUNS = 10_000
CHECKPOINTS = (1_000, 2_500, 5_000, 7_500, 10_000)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(port: int, profile_dir: str) -> None:
    logging.basicConfig(level=logging.WARNING)
    telemetry = otel_ort.configure(
        service_name="dead-collector", endpoint=f"http://127.0.0.1:{port}"
    )
    OrtInstrumentor().instrument(profile_sampler="every:50", profile_dir=profile_dir)
    session = ort.InferenceSession(mlp_model(width=32, depth=4), providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((2, 32), np.float32)}
    tracer = telemetry.tracer_provider.get_tracer("dead-collector")
    rss: dict[int, float] = {}
    started = time.monotonic()
    for index in range(1, RUNS + 1):
        with tracer.start_as_current_span("request"):
            session.run(None, feeds)
        if index in CHECKPOINTS:
            rss[index] = round(rss_mib(), 1)
    elapsed = time.monotonic() - started
    otel_ort.flush_profiles(timeout=60)
    print(
        json.dumps(
            {
                "runs": RUNS,
                "seconds": round(elapsed, 2),
                "rss_mib": rss,
                "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "dropped": telemetry.dropped(),
                "printed_at": time.time(),  # then the process exits: how long that takes
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

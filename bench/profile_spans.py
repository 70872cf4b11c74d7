"""Profile → spans → OTLP: each stage of a 10,000-node profile against a plain ``json.load``.

    .venv/bin/python -m bench.profile_spans [--nodes 10000] [--repeats 5]

One run measures, on the same file (a run-level-shaped ORT profile of N nodes whose args are
copied from a real ORT Node event): ``json.load`` of the file (the baseline); read → span
drafts (``read_profile`` + ``SpanBuilder``); drafts → OTLP bytes (otel-ort's encoder, with
the default byte budget and without one) against the SDK's path (``ReadableSpan`` +
``encode_spans`` + ``SerializeToString``); the live worker's path (read, attributes, encode,
hand to ``configure()``'s profile processor, the garbage collector paused as the worker pauses
it) per node, with a new span builder and with one that converted the same file before (its
caches warm, as the worker's are from a model's second profiled run on); and ``otel-ort
convert`` to a local
OTLP receiver (``tests/helpers/otlp_receiver.py``) in a subprocess, as the marginal wall time over a
one-node file. CPU seconds (``time.process_time``), medians. Targets: end-to-end marginal
cost <= 5x the ``json.load``; <= 15 us of CPU per node in the worker path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_ort._util.gc_pause import gc_paused
from otel_ort.cli.tables import format_table
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import Encoded
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.profiles import read_profile
from otel_ort.profiles.span_draft import DeferredAttributes, SpanDraft, readable
from otel_ort.profiles.spans import SpanBuilder
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import session_level_profile

NO_BUDGET = 1 << 62
WARM = "worker, the same model again (caches warm)"


class NullEncodedExporter:
    """Takes encoded requests and counts them (the transport is measured end to end)."""

    def __init__(self) -> None:
        self.spans = self.bytes = 0

    def export_encoded(self, batch: Encoded) -> SpanExportResult:
        self.spans += batch.spans
        self.bytes += len(batch.request)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def large_profile(directory: Path, nodes: int) -> Path:
    """A one-run profile of ``nodes`` Node events, args copied from a real ORT profile."""
    real = json.loads(session_level_profile(directory, depth=2, runs=1).read_text())
    template = next(e for e in real if e["cat"] == "Node")
    events = [{**template, "cat": "Session", "name": "model_run", "ts": 0,
               "dur": nodes * 10 + 10, "args": {}}]  # fmt: skip
    for k in range(nodes):
        events.append({**template, "name": f"node_{k}_kernel_time", "ts": 5 + 10 * k, "dur": 8,
                       "args": {**template["args"], "node_index": str(k)}})  # fmt: skip
    path = directory / f"large_{nodes}.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
    return path


def cpu(function: Callable[[], object]) -> float:
    start = time.process_time()
    function()
    return time.process_time() - start


def json_load(path: Path) -> None:
    with open(path) as file:
        json.load(file)


def drafts_of(path: Path, budget: int) -> list[SpanDraft]:
    profile = read_profile(path)
    builder = SpanBuilder(TracerProvider(), max_trace_bytes=budget)
    return [draft for run in profile.runs for draft in builder.run_drafts(profile, run)]


def encode(drafts: list[SpanDraft]) -> int:
    encoder = ProtobufSpans()
    spans = b"".join(encoder.span(draft) for draft in drafts)
    first = drafts[0]
    return len(encoder.request([(first.resource, first.scope, spans)]))


def sdk_encode(drafts: list[SpanDraft]) -> int:
    return len(encode_spans([readable(draft) for draft in drafts]).SerializeToString())


def worker_path(path: Path, builder: SpanBuilder | None = None) -> None:
    """What the profile worker does per profiled run with configure()'s pipeline; with
    ``builder``, one that converted the same model before (its caches warm, as the live
    worker's are from a model's second profiled run on)."""
    provider = TracerProvider()
    exporter = NullEncodedExporter()
    processor = ProfileExportProcessor(exporter, ProtobufSpans())
    provider.add_span_processor(processor)
    builder, delivery = builder or SpanBuilder(provider), SpanDelivery(provider)
    with gc_paused():  # as the worker's conversion: the parsed file freed before it ends
        profile = read_profile(path, start_ns=time.time_ns())
        drafts, _ = builder.node_drafts(profile, profile.runs[0], 1, 1)
        del profile
    delivery.deliver_drafts(drafts)
    processor.force_flush()
    processor.shutdown()


def convert_wall(path: Path, endpoint: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``otel-ort convert path --otlp-endpoint endpoint``."""
    code = (
        "import resource, sys, time; from otel_ort.cli import main; t = time.perf_counter(); "
        "rc = main(['convert', sys.argv[1], '--otlp-endpoint', sys.argv[2]]); "
        "r = resource.getrusage(resource.RUSAGE_SELF); "
        "print(time.perf_counter() - t, r.ru_utime + r.ru_stime, file=sys.stderr); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), endpoint],
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu_s = done.stderr.split()[-2:]
    return float(wall), float(cpu_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    def timed(label: str, function: Callable[[], object]) -> None:
        times.setdefault(label, []).append(cpu(function))

    with tempfile.TemporaryDirectory() as directory, OtlpReceiver() as receiver:
        path = large_profile(Path(directory), args.nodes)
        tiny = large_profile(Path(directory), 1)
        megabytes = path.stat().st_size / 1e6
        full, cut = drafts_of(path, NO_BUDGET), drafts_of(path, 4_000_000)
        for draft in (*full, *cut):  # let the profile go: a larger heap slows json.load's GC
            if isinstance(draft.attributes, DeferredAttributes):
                draft.attributes.resolved()
        sizes["all spans"], sizes["default budget"] = encode(full), encode(cut)
        sizes["spans kept"] = len(cut)
        warm = SpanBuilder(TracerProvider())
        worker_path(path, warm)
        for repeat in range(args.repeats):
            timed("json.load of the file", lambda: json_load(path))
            timed("read -> span drafts (default budget)", lambda: drafts_of(path, 4_000_000))
            timed("drafts -> OTLP bytes (default budget)", lambda: encode(cut))
            timed("drafts -> OTLP bytes (all spans)", lambda: encode(full))
            timed("SDK: ReadableSpans -> encode_spans -> bytes (all)", lambda: sdk_encode(full))
            timed("worker: read + attributes + encode + hand over", lambda: worker_path(path))
            timed(WARM, lambda: worker_path(path, warm))
            big, small = (
                convert_wall(path, receiver.grpc_endpoint),
                convert_wall(tiny, receiver.grpc_endpoint),
            )
            times.setdefault("convert to OTLP receiver: marginal wall", []).append(
                big[0] - small[0]
            )
            times.setdefault("convert to OTLP receiver: marginal CPU", []).append(big[1] - small[1])
            print(f"\rrepeat {repeat + 1}/{args.repeats}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    median = {label: statistics.median(values) for label, values in times.items()}
    baseline = median["json.load of the file"]
    rows = [("stage", "seconds", "vs json.load", "us per node")]
    for label, seconds in median.items():
        rows.append((label, f"{seconds:.3f}", f"{seconds / baseline:.1f}x",
                     f"{seconds / args.nodes * 1e6:.1f}"))  # fmt: skip
    print(f"\n{args.nodes}-node profile ({megabytes:.1f} MB), "
          f"CPU seconds unless said, medians of {args.repeats}\n")  # fmt: skip
    print(format_table(rows))
    print(
        f"\nOTLP request: {sizes['all spans'] / 1e6:.2f} MB with every span, "
        f"{sizes['default budget'] / 1e6:.2f} MB with the default budget "
        f"({sizes['spans kept']} of {args.nodes + 1} spans)"
    )
    verdict = {True: "met", False: "MISSED"}
    marginal = median["convert to OTLP receiver: marginal wall"] / baseline
    per_node = median["worker: read + attributes + encode + hand over"] / args.nodes * 1e6
    warm_per_node = median[WARM] / args.nodes * 1e6
    print(
        f"end-to-end marginal <= 5x json.load: {verdict[marginal <= 5]} ({marginal:.1f}x); "
        f"worker <= 15 us per node: {verdict[per_node <= 15]} ({per_node:.1f} us; "
        f"{warm_per_node:.1f} us with its caches warm)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

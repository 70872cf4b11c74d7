"""Profile → spans: otel-ort's direct span building against SDK start_span/end, same run.

    .venv/bin/python -m bench.profile_spans [--nodes 10000] [--repeats 5]

Both paths start from the same profile (a real ORT run-level-shaped file of N nodes whose
args are copied from a real ORT Node event) and end at the exporter's input (a
BatchSpanProcessor in front of a null exporter, flushed). Targets: >= 5x faster than the SDK
path; a 10,000-node run converted (read + build + deliver) in <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import set_span_in_context

from otel_ort.delivery import SpanDelivery
from otel_ort.profiling import read_profile
from otel_ort.spans import SpanBuilder, _node_attributes
from otel_ort.tables import format_table
from tests.profiles import session_level_profile


class NullExporter(SpanExporter):
    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


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


def provider_with_null_exporter() -> tuple[TracerProvider, NullExporter]:
    exporter = NullExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=2048))
    return provider, exporter


def ours(path: Path) -> tuple[float, float, int]:
    """(seconds for the whole conversion, seconds from the read profile on, spans exported)."""
    provider, exporter = provider_with_null_exporter()
    start = time.perf_counter()
    profile = read_profile(path)
    read = time.perf_counter()
    builder, delivery = SpanBuilder(provider), SpanDelivery(provider)
    for run in profile.runs:
        delivery.deliver(builder.run_tree(profile, run))
    provider.force_flush()
    end = time.perf_counter()
    provider.shutdown()
    return end - start, end - read, exporter.count


def sdk(path: Path) -> tuple[float, float, int]:
    """The same spans (same names, attributes and times) through tracer.start_span/end."""
    provider, exporter = provider_with_null_exporter()
    start = time.perf_counter()
    profile = read_profile(path)
    read = time.perf_counter()
    (run,) = profile.runs
    base = profile.start_ns
    tracer = provider.get_tracer("bench")
    run_span = tracer.start_span("onnxruntime.run", start_time=base + int(run.ts * 1000))
    context = set_span_in_context(run_span)
    for node in run.nodes:
        child = tracer.start_span(
            node.name,
            context=context,
            attributes=_node_attributes(node),
            start_time=base + int(node.ts * 1000),
        )
        child.end(end_time=base + int(node.end * 1000))
    run_span.end(end_time=base + int(run.end * 1000))
    provider.force_flush()
    end = time.perf_counter()
    provider.shutdown()
    return end - start, end - read, exporter.count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        path = large_profile(Path(directory), args.nodes)
        totals: dict[str, list[float]] = {"otel-ort": [], "SDK start_span/end": []}
        spans_only: dict[str, list[float]] = {"otel-ort": [], "SDK start_span/end": []}
        for repeat in range(args.repeats):
            for label, function in zip(totals, (ours, sdk), strict=True):
                whole, after_read, exported = function(path)
                assert exported == args.nodes + 1, (label, exported)
                totals[label].append(whole)
                spans_only[label].append(after_read)
            print(f"\rrepeat {repeat + 1}/{args.repeats}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    total = {label: statistics.median(v) for label, v in totals.items()}
    spans = {label: statistics.median(v) for label, v in spans_only.items()}
    sdk_spans = spans["SDK start_span/end"]
    rows = [("path", "whole conversion s", "read profile -> exporter s", "node spans/s", "vs SDK")]
    for label in totals:
        rows.append((
            label, f"{total[label]:.3f}", f"{spans[label]:.3f}",
            f"{args.nodes / spans[label]:.0f}", f"{sdk_spans / spans[label]:.1f}",
        ))  # fmt: skip
    print(f"\n{args.nodes}-node run, medians of {args.repeats}\n")
    print(format_table(rows))
    speedup = sdk_spans / spans["otel-ort"]
    verdict = {True: "met", False: "MISSED"}
    print(
        f"\nspans >= 5x faster than the SDK: {verdict[speedup >= 5]} ({speedup:.1f}x); "
        f"{args.nodes}-node run in <= 0.5 s: {verdict[total['otel-ort'] <= 0.5]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

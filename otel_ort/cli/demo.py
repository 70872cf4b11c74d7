"""The main job on the embedded default: the whole product on a small built-in model.

``otel-ort demo`` builds a small MLP and instruments ONNX Runtime with in-process SDK
providers. It serves a few "requests" (one of them failing on purpose), profiles every 5th
run and one on demand, and prints the job's span tree, one profiled run node by node with
its perf counters (with a legend: what task-clock sums, and why the run's span is longer
than the run time the report shows), and the latency and profiling tables. It keeps every
span in an OTLP/JSON lines file, each profile's Chrome JSON and an HTML report of the last
one. No server is needed; ``otlp_endpoint`` also sends the spans to a collector (over
``protocol``: ``grpc``, ``http/protobuf``, or ``None`` for the OTLP variables' choice).
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_ort import semconv
from otel_ort.cli.console import render_span_tree
from otel_ort.cli.tables import format_table
from otel_ort.demo_model import mlp_model
from otel_ort.export.configure import Telemetry, configure
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from otel_ort.instrumentation import OrtInstrumentor, flush_profiles
from otel_ort.profiles.chrome import VIEWERS
from otel_ort.profiles.reader import ProfileError, read_profile
from otel_ort.profiling.store import ProfileDirError, prepare_dir
from otel_ort.report import write_report
from otel_ort.sampling import EveryNth, profile_next_run

SERVICE_NAME = "otel-ort-demo"
PROFILE_EVERY = 5


@dataclass
class _Telemetry:
    """The demo's in-process providers; spans also go to a file, and over OTLP if asked."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    otlp: Telemetry | None


def run_demo(
    output_dir: Path,
    requests: int = 20,
    out: TextIO | None = None,
    otlp_endpoint: str | None = None,
    protocol: str | None = None,
) -> int:
    """Run the demo, reporting on ``out`` (stdout); return how many spans did not reach
    ``otlp_endpoint`` (0 without one) over ``protocol``."""
    out = out or sys.stdout
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        profile_dir = prepare_dir(str(output_dir / "profiles"))
    except ProfileDirError as exc:
        raise ProfileDirError(f"--output-dir: the profiles' {exc}") from None
    model_path = output_dir / "mlp.onnx"
    model_path.write_bytes(mlp_model(width=256, depth=6))
    spans_path = output_dir / "spans.otlp.jsonl"
    spans_path.unlink(missing_ok=True)
    telemetry = _telemetry(spans_path, otlp_endpoint, protocol)

    instrumentor = OrtInstrumentor()
    instrumentor.instrument(
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        profile_sampler=EveryNth(PROFILE_EVERY),
        profile_dir=profile_dir,
    )
    try:
        _serve(model_path, telemetry.tracer_provider.get_tracer("otel_ort.demo"), requests, out)
        flush_profiles()
    finally:
        instrumentor.uninstrument()
        if telemetry.otlp is None:  # else after the metric tables below (or at exit)
            telemetry.tracer_provider.shutdown()

    spans = telemetry.spans.get_finished_spans()
    header = f"{requests + 1} requests: {requests} good, 1 failing on purpose"
    print(f"\nSpan tree ({header}):\n", file=out)
    print(render_span_tree(spans, max_children=4), file=out)
    profiled = [s for s in spans if (s.attributes or {}).get(semconv.RUN_PROFILED) is True]
    if profiled:
        _print_profiled_run(profiled[-1], spans, out)
    print("\nRun latency, from the onnxruntime.run.duration histogram:\n", file=out)
    print(_latency_table(telemetry.metrics), file=out)
    print("\nRuns selected for profiling, from the onnxruntime.profile.runs counter:\n", file=out)
    outcomes = _outcome_table(telemetry.metrics)
    print(outcomes, file=out)
    notes = {
        semconv.RUN_FAILED_OUTCOME: "the bad request was selected too: ORT raised as usual "
        "and its empty profile was dropped",
    }
    said = [f"{outcome}: {note}" for outcome, note in notes.items() if outcome in outcomes]
    if said:
        print("(" + ";\n ".join(said) + ")", file=out)
    print(f"\nmodel:    {model_path}", file=out)
    print(f"spans:    {spans_path}  (OTLP/JSON lines, one export batch per line)", file=out)
    if profiled:
        _print_profile_files(profiled, output_dir, out)
    if telemetry.otlp is not None:
        telemetry.otlp.shutdown()
    return _print_export(telemetry.otlp, out)


def _telemetry(spans_path: Path, otlp_endpoint: str | None, protocol: str | None) -> _Telemetry:
    metrics = InMemoryMetricReader()
    if otlp_endpoint:
        otlp = configure(
            SERVICE_NAME, otlp_endpoint, protocol, metric_readers=[metrics], set_global=False
        )
        tracer_provider, meter_provider = otlp.tracer_provider, otlp.meter_provider
    else:
        otlp = None
        resource = Resource.create({"service.name": SERVICE_NAME})
        tracer_provider = TracerProvider(resource=resource)
        meter_provider = MeterProvider(metric_readers=[metrics], resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileSpanExporter(spans_path)))
    spans = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    return _Telemetry(tracer_provider, meter_provider, spans, metrics, otlp)


def _serve(model_path: Path, tracer: Tracer, requests: int, out: TextIO) -> None:
    """The demo's job: a session, ``requests`` requests and a bad one, each in its span."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    with tracer.start_as_current_span("demo.job"):
        session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        for index in range(requests):
            with tracer.start_as_current_span("demo.request") as request:
                request.set_attribute("demo.request.index", index)
                feeds = {"x": rng.standard_normal((8, 256), dtype=np.float32)}
                if index == 0:  # on demand, besides the sampler's
                    with profile_next_run():
                        session.run(None, feeds)
                else:
                    session.run(None, feeds)
        with tracer.start_as_current_span("demo.bad_request"):
            try:  # a wrong shape: ORT raises, the span records it, the caller sees ORT's error
                session.run(None, {"x": np.zeros((8, 3), np.float32)})
            except Exception as exc:
                print(f"a bad request failed as ORT intended: {type(exc).__name__}", file=out)


def _print_profile_files(profiled: Sequence[ReadableSpan], output_dir: Path, out: TextIO) -> None:
    """Where the profiles are, and the HTML report of the last one."""
    chrome = str((profiled[-1].attributes or {})[semconv.PROFILE_FILE])
    report = write_report(chrome, output_dir / "report.html", perf=True)
    print(f"profiles: {len(profiled)} in {output_dir / 'profiles'}", file=out)
    print(f"  last:   {chrome}  (Chrome trace: {VIEWERS})", file=out)
    print(f"report:   {report}  (open in a browser: timeline, op types, top nodes)", file=out)


def _print_export(otlp: Telemetry | None, out: TextIO) -> int:
    """Where the spans went; the number that did not get there."""
    if otlp is not None:
        dropped = otlp.dropped()
        lost = sum(dropped.values())
        reasons = []  # "requests.export_failed": 10 -> "requests: 10 export failed"
        for key, count in sorted(dropped.items()):
            stream, _, reason = key.partition(".")
            reasons.append(f"{stream}: {count} {reason.replace('_', ' ')}")
        why = ", ".join(reasons)
        verdict = f"{lost} spans not sent ({why})" if lost else "all sent"
        target = f"{otlp.target} over {otlp.protocol}"
        print(f"OTLP:     spans and metrics to {target}: {verdict}", file=out)
        return lost
    print(
        "\nTo see the same in Jaeger or Grafana Tempo: `make up` (docker compose: collector, "
        "Jaeger, Tempo,\nPrometheus, Grafana), then `otel-ort demo --otlp-endpoint "
        "http://localhost:4317` and open\nJaeger at http://localhost:16686 (service "
        f"{SERVICE_NAME}) or Grafana at http://localhost:3000.",
        file=out,
    )
    return 0


def _print_profiled_run(run: ReadableSpan, spans: Sequence[ReadableSpan], out: TextIO) -> None:
    """The run's span tree, node by node with its perf counters, and what perf could not count."""
    run_id = run.context.span_id if run.context else None
    nodes = [s for s in spans if s.parent is not None and s.parent.span_id == run_id]
    print("\nOne profiled run, a span per node, perf counters per node:\n", file=out)
    print(render_span_tree([run, *nodes], max_children=len(nodes) + 1), file=out)
    attributes = run.attributes or {}
    counted = sorted(
        key.removeprefix(semconv.PERF_PREFIX)
        for key, value in attributes.items()
        if key.startswith(semconv.PERF_PREFIX)
        and key.count(".") == 1
        and key not in (semconv.PERF_THREADS, semconv.PERF_SAMPLE_PERIOD_NS)
        and isinstance(value, int | float)
    )
    unavailable = attributes.get(semconv.PERF_UNAVAILABLE, ())
    lines = list(unavailable) if isinstance(unavailable, tuple | list) else []
    off = "none (perf is off: OTEL_ORT_PERF_EVENTS)" if not lines else "none"
    print(f"\nperf counters: {', '.join(counted) or off}", file=out)
    for line in lines:
        print(f"  not counted: {line}", file=out)
    threads = attributes.get(semconv.PERF_THREADS)
    if "task-clock" in counted and isinstance(threads, int) and threads > 1:
        legend = (
            f"task-clock: CPU time summed over the {threads} threads counted, the calling "
            "thread and ORT's intra-op pool threads, which spin while they wait for work: so "
            f"up to {threads}x a node's duration."
        )
        print(_wrapped(legend), file=out)
    print(_wrapped(_run_time_legend(run, bool(counted))), file=out)


def _wrapped(text: str) -> str:
    return textwrap.fill(text, width=92, subsequent_indent="  ", break_on_hyphens=False)


def _run_time_legend(run: ReadableSpan, perf: bool) -> str:
    """Why the run's span is longer than the run time the report shows (ORT's ``model_run``)."""
    span_ms = ((run.end_time or 0) - (run.start_time or 0)) / 1e6
    try:
        runs = read_profile(str((run.attributes or {})[semconv.PROFILE_FILE])).runs
    except (KeyError, OSError, ProfileError):
        runs = []
    ort = f", {runs[0].dur / 1e3:.3f} ms" if runs else ""
    return (
        f"time: the run's span, {span_ms:.3f} ms, is the whole profiled call; report.html "
        f"shows ORT's own run time{ort} (its model_run event: the graph's execution). The "
        "rest is mostly profiling's cost: otel-ort switching ORT's run profiling "
        f"{'and the perf counters ' if perf else ''}on before ORT's call, then ORT's "
        "profiler writing the run's JSON file within it. The first profiled run's span (in "
        "the tree above) also holds otel-ort's one-time set-up of profiling in the process."
    )


def _points(reader: InMemoryMetricReader, name: str) -> Iterator[object]:
    """The data points of metric ``name`` collected so far."""
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == name:
                    yield from metric.data.data_points


def _latency_table(reader: InMemoryMetricReader) -> str:
    rows = [("model", "provider", "profiled", "error.type", "runs", "mean ms")]
    for point in _points(reader, semconv.METRIC_RUN_DURATION):
        if isinstance(point, HistogramDataPoint):
            attributes = point.attributes or {}
            rows.append(
                (
                    os.path.basename(str(attributes.get(semconv.MODEL_PATH, ""))),
                    str(attributes.get(semconv.SESSION_PROVIDER, "")),
                    str(attributes.get(semconv.RUN_PROFILED, "")).lower(),
                    str(attributes.get(semconv.ERROR_TYPE, "-")),
                    str(point.count),
                    f"{point.sum / max(point.count, 1) * 1e3:.3f}",
                )
            )
    return format_table(rows)


def _outcome_table(reader: InMemoryMetricReader) -> str:
    rows = [("outcome", "runs")]
    for point in _points(reader, semconv.METRIC_PROFILE_RUNS):
        if isinstance(point, NumberDataPoint):
            outcome = (point.attributes or {}).get(semconv.PROFILE_OUTCOME, "")
            rows.append((str(outcome), str(point.value)))
    return format_table(rows)

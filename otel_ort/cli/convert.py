"""``otel-ort convert``: replay ORT profile files (any ORT, any language binding) as traces.

One trace per run: a run span, a span per node, GPU kernels under their nodes; the run span of
a file otel-ort kept links to the traced run it profiled. Spans go to an
OTLP endpoint, an OTLP/JSON lines file and/or the terminal, through an SDK TracerProvider of
their own (``service.name`` from ``--service-name``, else ``OTEL_SERVICE_NAME``, else
``onnxruntime``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort.cli.console import render_span_tree
from otel_ort.cli.tables import printable
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint, delivery_report
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from otel_ort.export.otlp_transport import encoded_span_exporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.perf.tracks import counters
from otel_ort.profiles import Profile, ProfileError, read_profile
from otel_ort.profiles.enriched import other_data, run_ids
from otel_ort.profiles.spans import DEFAULT_MAX_NODE_SPANS, DEFAULT_MAX_TRACE_BYTES, SpanBuilder


@dataclass(frozen=True)
class ConvertOptions:
    service_name: str | None = None
    otlp_endpoint: str | None = None
    protocol: str = "grpc"
    console: bool = False
    output: str | None = None
    max_node_spans: int = DEFAULT_MAX_NODE_SPANS
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES


def convert_files(paths: Sequence[str], options: ConvertOptions, out: TextIO | None = None) -> int:
    """Convert every file; report each on ``out`` (stdout); return the number that failed,
    plus one if spans did not reach the OTLP endpoint (said on stderr)."""
    out = out or sys.stdout
    service = options.service_name or os.environ.get("OTEL_SERVICE_NAME") or "onnxruntime"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory = InMemorySpanExporter() if options.console else None
    if memory is not None:  # the console renders SDK spans
        provider.add_span_processor(BatchSpanProcessor(memory))
    file = None
    if options.output:  # profile spans encoded straight to OTLP/JSON
        try:
            file = OtlpJsonFileSpanExporter(options.output)
            provider.add_span_processor(ProfileExportProcessor(file, JsonSpans()))
        except OSError as exc:
            print(
                f"otel-ort convert: cannot write {options.output} ({exc.strerror or exc}): "
                "pick a writable file with --output",
                file=sys.stderr,
            )
            return 1
    otlp = None
    if options.otlp_endpoint:  # and to OTLP protobuf, sent through the SDK's exporter
        inner = encoded_span_exporter(options.protocol, options.otlp_endpoint)
        otlp = CountingSpanExporter(inner, Endpoint(options.otlp_endpoint, pause_s=0.0))
        provider.add_span_processor(ProfileExportProcessor(otlp, ProtobufSpans()))
    builder = SpanBuilder(provider, options.max_node_spans, options.max_trace_bytes)
    delivery = SpanDelivery(provider)
    failed = traces = spans = 0
    for number, path in enumerate(paths, start=1):
        prefix = f"[{number}/{len(paths)}] {printable(path)}"
        try:
            profile = read_profile(path)
        except ProfileError as exc:
            print(f"{prefix}: skipped: {exc.problem}", file=sys.stderr)
            failed += 1
            continue
        spans += _send(profile, builder, delivery, prefix, out)
        traces += len(profile.runs)
    provider.shutdown()
    if memory is not None and memory.get_finished_spans():
        print(render_span_tree(memory.get_finished_spans()), file=out)
    if file is not None and file.failed:
        print(
            f"otel-ort convert: {file.failed} spans could not be written to {options.output} "
            f"({file.problem})",
            file=sys.stderr,
        )
        failed += 1
    elif file is not None:
        print(f"spans written to {options.output}", file=out)
    if otlp is not None and options.otlp_endpoint:
        summary, lost = delivery_report(otlp, options.otlp_endpoint, traces, spans)
        print(summary, file=out)
        if lost:
            print(f"otel-ort convert: {lost}", file=sys.stderr)
            failed += 1
    return failed


def _send(
    profile: Profile, builder: SpanBuilder, delivery: SpanDelivery, prefix: str, out: TextIO
) -> int:
    """Deliver the span trees of ``profile``'s runs (with the perf counts of a file otel-ort
    kept) and say what was sent; how many spans were handed to the span processors."""
    nodes = dropped = handed = not_emitted = over_bytes = kernels_not_emitted = linked = 0
    found = counters(profile.events)
    ids = run_ids(profile.events, profile.runs, other_data(profile.path))
    for run, (trace_id, span_id) in zip(profile.runs, ids, strict=True):
        counts = [
            {semconv.PERF_PREFIX + alias: value for alias, value in (values or {}).items()}
            for values in found.for_nodes(run.nodes)
        ]
        link = _traced_run(trace_id, span_id)
        linked += link is not None
        drafts = builder.run_drafts(profile, run, node_extra=counts, link=link)
        dropped += delivery.deliver_drafts(drafts)
        handed += len(drafts)
        nodes += len(run.nodes)
        summary = drafts[-1].attributes  # run_drafts puts the run span last
        if summary.get(semconv.RUN_NOT_EMITTED_LIMIT) == "max_trace_bytes":
            over_bytes += _count(summary, semconv.RUN_NODES_NOT_EMITTED)
        else:
            not_emitted += _count(summary, semconv.RUN_NODES_NOT_EMITTED)
        kernels_not_emitted += _count(summary, semconv.RUN_KERNELS_NOT_EMITTED)
    notes = [f"time base from {profile.start_source}"]
    if linked:
        notes.append(f"{linked} run span(s) linked to the traced run")
    if found.aliases:
        notes.append(f"perf counts: {', '.join(found.aliases)}")
    incomplete = sum(not run.complete for run in profile.runs)
    if incomplete:
        notes.append(f"{incomplete} run(s) INCOMPLETE: the file ends before they do")
    if profile.truncated:
        notes.append("TRUNCATED file: complete events only")
    if not_emitted:
        notes.append(f"{not_emitted} nodes over --max-node-spans summarised on run spans")
    if over_bytes:
        notes.append(f"{over_bytes} nodes over --max-trace-bytes summarised on run spans")
    if kernels_not_emitted:
        notes.append(f"{kernels_not_emitted} kernels of those nodes not emitted")
    if dropped:
        notes.append(f"{dropped} spans DROPPED by a span processor")
    notes += profile.problems
    print(
        f"{prefix}: {len(profile.runs)} run(s), {nodes} nodes -> {len(profile.runs)} trace(s) "
        f"({'; '.join(notes)})",
        file=out,
    )
    return handed


def _count(attributes: Mapping[str, AttributeValue], key: str) -> int:
    value = attributes.get(key, 0)
    return value if isinstance(value, int) else 0


def _traced_run(trace_id: str | None, span_id: str | None) -> SpanContext | None:
    """The run span of the trace a kept file names (otel-ort wrote its ids), if valid."""
    try:
        context = SpanContext(
            int(trace_id or "0", 16),
            int(span_id or "0", 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except ValueError:
        return None
    return context if context.is_valid else None

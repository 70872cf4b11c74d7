"""``otel-ort profile``'s output: the kept files and the tables on stdout, and each run's span
tree sent as its own trace over OTLP."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from otel_ort.cli.profile_perf import CommandPerf
from otel_ort.cli.profile_session import UserError
from otel_ort.cli.tables import plural
from otel_ort.export.delivery import SpanDelivery
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint, delivery_report
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import encoded_span_exporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.perf.report import ProfileCounts
from otel_ort.profiles.chrome import VIEWERS
from otel_ort.profiles.records import Profile
from otel_ort.profiles.spans import SpanBuilder
from otel_ort.profiles.summary import summarize
from otel_ort.profiling.store import ProfileStore

_LISTED_RUNS = 20
"""More runs than this list their first and last halves' files."""


def print_results(
    profiles: Sequence[Profile], store: ProfileStore, model: str, perf: CommandPerf, out: TextIO
) -> None:
    """The kept files, one line per run (the first and last ones of many), what perf counted,
    then the tables over all runs."""
    print(f"\nProfile files, one per run ({VIEWERS}):", file=out)
    half, hidden = _LISTED_RUNS // 2, max(0, len(profiles) - _LISTED_RUNS)
    width = len(str(len(profiles)))
    for number, profile in enumerate(profiles, start=1):
        if half < number <= half + hidden:
            if number == half + 1:
                print(f"  ... {plural(hidden, 'more run')}", file=out)
            continue
        where = profile.path
        if not os.path.exists(where):
            where = "(deleted: see below)" if store.deleted else "(gone: deleted elsewhere)"
        print(f"  run {number:<{width}} {profile.runs[0].dur / 1000:8.3f} ms  {where}", file=out)
    if store.deleted:
        print(
            f"  ({store.deleted} older files deleted: {store.directory} keeps the newest "
            f"{store.max_files}, {store.max_bytes // 2**20} MiB at most)",
            file=out,
        )
    print(f"\n{perf.describe()}", file=out)
    print(f"\n{summarize(profiles, title=model)}", file=out)


class TraceSender:
    """Sends each run's span tree as its own trace over OTLP (``protocol``: ``grpc`` or
    ``http/protobuf``) to ``endpoint``, as the service ``service_name``."""

    def __init__(self, endpoint: str, protocol: str, service_name: str | None) -> None:
        self.endpoint = endpoint
        service = service_name or os.environ.get("OTEL_SERVICE_NAME") or "onnxruntime"
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        inner = encoded_span_exporter(protocol, self.endpoint)  # as convert: OTLP bytes direct
        self.exporter = CountingSpanExporter(inner, Endpoint(self.endpoint, pause_s=0.0))
        self.provider.add_span_processor(ProfileExportProcessor(self.exporter, ProtobufSpans()))
        self.builder = SpanBuilder(self.provider)
        self.delivery = SpanDelivery(self.provider)
        self.traces = self.spans = 0

    def send(self, profile: Profile, counts: ProfileCounts | None) -> SpanContext:
        """Queue the span tree of the profile's run (with its perf counts); the run span's
        context."""
        run, nodes = (counts.run, counts.nodes) if counts is not None else (None, ())
        drafts = self.builder.run_drafts(profile, profile.runs[0], run_extra=run, node_extra=nodes)
        self.delivery.deliver_drafts(drafts)  # what a processor drops, the report counts lost
        self.spans += len(drafts)
        self.traces += 1
        run_span = drafts[-1]  # run_drafts puts the run span last
        return SpanContext(
            run_span.trace_id, run_span.span_id, False, TraceFlags(TraceFlags.SAMPLED)
        )

    def close(self, out: TextIO) -> None:
        """Flush and shut down, report what was sent; ``UserError`` if spans were lost."""
        print(f"\nsending {plural(self.traces, 'trace')} to {self.endpoint} ...", file=out)
        self.provider.shutdown()
        summary, lost = delivery_report(self.exporter, self.endpoint, self.traces, self.spans)
        print(f"\n{summary}", file=out)
        if lost:
            raise UserError(lost)

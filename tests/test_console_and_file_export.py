"""The terminal tree and the OTLP/JSON lines file, on spans from a real SDK tracer."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort.cli.console import render_span_tree
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter
from tests.conftest import file_spans


def make_trace(path: Path | None = None, children: int = 6) -> InMemorySpanExporter:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if path is not None:
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(path)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root"):
        for index in range(children):
            with (
                tracer.start_as_current_span(f"child{index}"),
                tracer.start_as_current_span("leaf"),
            ):
                pass
    provider.shutdown()
    return memory


def test_tree_shows_first_children_last_child_and_count() -> None:
    tree = render_span_tree(make_trace().get_finished_spans(), max_children=3)
    lines = [re.sub(r"\s+[\d.]+ ms.*$", "", line) for line in tree.splitlines()]
    assert lines[0].startswith("trace ")
    assert lines[1:] == [
        "root",
        "├─ child0",
        "│  └─ leaf",
        "├─ child1",
        "│  └─ leaf",
        "├─ … 3 more",
        "└─ child5",
        "   └─ leaf",
    ]


def test_file_exporter_writes_otlp_json_with_hex_ids(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    memory = make_trace(path, children=2)
    lines = path.read_text().splitlines()
    assert len(lines) == 5  # SimpleSpanProcessor: one export call, one line, per span
    spans = file_spans(path)
    expected = {f"{s.context.span_id:016x}": s for s in memory.get_finished_spans()}
    assert {span["spanId"] for span in spans} == set(expected)
    for span in spans:
        original = expected[span["spanId"]]
        assert span["traceId"] == f"{original.context.trace_id:032x}"
        if original.parent:
            assert span["parentSpanId"] == f"{original.parent.span_id:016x}"
    # still the protobuf schema once ids are bytes again (what the Collector reads back)
    request = json.loads(lines[0])
    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    ParseDict(request, ExportTraceServiceRequest())


FULL_DISK_SCRIPT = """
import resource, signal, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otel_ort.export.otlp_json_file import OtlpJsonFileSpanExporter

memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(memory))
tracer = provider.get_tracer("test")
for size in (10, 20_000, 10):
    with tracer.start_as_current_span("s", attributes={"a": "x" * size}):
        pass
small, big, last = memory.get_finished_spans()
exporter = OtlpJsonFileSpanExporter(sys.argv[1])
print(exporter.export([small]).name)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))  # like a disk that fills mid-line
print(exporter.export([big]).name, exporter.failed)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
print(exporter.export([last]).name)
exporter.shutdown()
"""


def test_a_line_the_disk_had_no_room_for_leaves_nothing_behind(tmp_path: Path) -> None:
    """A batch written in part (a full disk) is counted as failed and taken back: the next
    batch's line is not glued to it."""
    path = tmp_path / "spans.jsonl"
    completed = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["SUCCESS", "FAILURE", "1", "SUCCESS"]
    assert [len(json.loads(line)["resourceSpans"]) for line in path.read_text().splitlines()] == [
        1,
        1,
    ]

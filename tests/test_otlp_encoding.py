"""otel-ort's OTLP encoders against the SDK's, on the same spans of real ORT profiles; the
byte budget of a run's spans."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from otel_ort import semconv
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.profiles import read_profile
from otel_ort.profiles.span_draft import SpanDraft, readable
from otel_ort.profiles.spans import SpanBuilder
from tests.helpers.profiles import (
    kernel_event,
    loop_profile,
    model_run,
    node_event,
    session_level_profile,
    write,
)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("profiles")
    gpu = [
        model_run(0, 1000),
        node_event(
            "conv", "Conv", 10, 100, output_size="4096", input_type_shape=[{"float": [1, 3]}]
        ),
        node_event("relu", "Relu", 200, 50),
        node_event("gemm", "Gemm", 300, 80),
        kernel_event("k_conv", "Conv", 20, 30, parent_name="conv_kernel_time"),
        kernel_event("k_conv2", "Conv", 60, 30, parent_name="conv_kernel_time"),
        kernel_event("k_relu", "Relu", 210, 10),  # linked by op type and window
        kernel_event("memcpy", "", 500, 10, grid_x="-1", grid_y="-1", grid_z="-1"),
        kernel_event("stray", "Gemm", 900, 20),  # no node's window: unmatched
    ]
    return {
        "session": session_level_profile(directory, depth=10, runs=2),
        "loop": loop_profile(directory, 3),
        "gpu": write(directory / "gpu.json", gpu),
    }


def perf_counts(count: int) -> list[dict[str, Any]]:
    """Node attributes as ``count_profile`` gives them: ints and doubles, some repeated."""
    return [
        {semconv.PERF_PREFIX + "task_clock_ns": 1000 + k % 3, semconv.PERF_PREFIX + "ipc": 1.5}
        for k in range(count)
    ]


def drafts_of(
    path: Path,
    limits: SpanLimits | None = None,
    *,
    link: bool = False,
    options: dict[str, int] | None = None,
) -> list[SpanDraft]:
    provider = TracerProvider(
        resource=Resource.create({"service.name": "enc", "replicas": 3}),
        span_limits=limits or SpanLimits(),
    )
    builder = SpanBuilder(provider, **(options or {}))
    profile = read_profile(path)
    linked = SpanContext(0xABC, 0xDEF, True, TraceFlags(TraceFlags.SAMPLED))
    drafts = []
    for run in profile.runs:
        drafts += builder.run_drafts(
            profile,
            run,
            run_extra={semconv.PERF_PREFIX + "cycles": 12345},
            node_extra=perf_counts(len(run.nodes)),
            link=linked if link else None,
        )
    return drafts


def ours(drafts: list[SpanDraft]) -> ExportTraceServiceRequest:
    encoder = ProtobufSpans()
    spans = b"".join(encoder.span(draft) for draft in drafts)
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoder.request([(drafts[0].resource, drafts[0].scope, spans)]))
    return request


def by_span_id(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """The request with its spans in span-id order (encoders may order spans differently)."""
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = sorted(scope_spans.spans, key=lambda span: span.span_id)
            del scope_spans.spans[:]
            scope_spans.spans.extend(spans)
    return request


CASES = [
    ("session", {}),
    ("loop", {"max_node_spans": 4}),  # the run span's not-emitted summary
    ("gpu", {}),
    ("gpu", {"max_node_spans": 3}),
    ("session", {"max_trace_bytes": 5000}),  # the byte budget binds
]


@pytest.mark.parametrize(
    "limits",
    [None, SpanLimits(max_span_attribute_length=6, max_span_attributes=7)],
    ids=["no-limits", "span-limits"],
)
@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_our_protobuf_is_the_sdks_encoding_of_the_same_spans(
    profiles: dict[str, Path], name: str, options: dict[str, int], limits: SpanLimits | None
) -> None:
    drafts = drafts_of(profiles[name], limits, link=True, options=options)
    expected = encode_spans([readable(draft) for draft in drafts])
    got = ours(drafts)
    assert by_span_id(got) == by_span_id(expected)  # every field of every span
    spans = [s for rs in got.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == len(drafts)
    assert any(len(span.links) == 1 for span in spans)
    if limits is not None:
        assert any(span.dropped_attributes_count for span in spans)


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_our_otlp_json_is_the_sdks_encoding_as_the_file_exporter_wrote_it(
    profiles: dict[str, Path], name: str, options: dict[str, int]
) -> None:
    drafts = drafts_of(profiles[name], link=True, options=options)
    encoder = JsonSpans()
    line = encoder.request(
        [(drafts[0].resource, drafts[0].scope, b",".join(encoder.span(d) for d in drafts))]
    )
    expected = MessageToDict(
        encode_spans([readable(draft) for draft in drafts]), use_integers_for_enums=True
    )
    for resource_spans in expected["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for item in (span, *span.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64decode(item[key]).hex()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == expected


def test_every_measured_size_is_the_encoded_size(profiles: dict[str, Path]) -> None:
    encoder = ProtobufSpans()
    for path in profiles.values():
        for draft in drafts_of(path, link=True):
            assert encoder.measure(draft) == len(encoder.span(draft))


@pytest.mark.parametrize("parent_id", [0, 5])
@pytest.mark.parametrize(("start", "end"), [(0, 0), (1, 0), (0, 2), (10, 20)])
@pytest.mark.parametrize("size", [10, 100, 20_000])
def test_measure_parts_is_measure(parent_id: int, start: int, end: int, size: int) -> None:
    """What the span builder uses for a node span it encoded itself."""
    encoder = ProtobufSpans()
    resource = Resource.create({"service.name": "measure"})
    draft = SpanDraft(1, 2, parent_id, "n" * size, start, end, {"a": "b" * size}, resource, None)
    parts = encoder._parts(draft)
    measured = ProtobufSpans.measure_parts(parts, parent_id, start, end)
    assert measured == encoder.measure(draft) == len(encoder.span(draft))


def node_bytes(drafts: list[SpanDraft]) -> int:
    encoder = ProtobufSpans()
    return sum(encoder.measure(d) for d in drafts if d.name != semconv.SPAN_RUN)


def test_the_byte_budget_keeps_the_longest_nodes_and_counts_the_rest(
    profiles: dict[str, Path],
) -> None:
    everything = drafts_of(profiles["gpu"])
    budget = node_bytes(everything) - 1  # one byte short: something must go
    drafts = drafts_of(profiles["gpu"], options={"max_trace_bytes": budget})
    run = drafts[-1].attributes
    assert node_bytes(drafts) <= budget
    assert run[semconv.RUN_NOT_EMITTED_LIMIT] == "max_trace_bytes"
    assert run[semconv.RUN_EMITTED_BYTES] == node_bytes(drafts)
    names = {d.name for d in drafts}
    assert "conv" in names  # the longest node, with both its kernels
    assert {"k_conv", "k_conv2"} <= names
    left = run[semconv.RUN_NODES_NOT_EMITTED]
    kernels_left = run.get(semconv.RUN_KERNELS_NOT_EMITTED, 0)
    assert isinstance(left, int) and isinstance(kernels_left, int)
    assert len(drafts) - 1 + left + kernels_left == len(everything) - 1


def budget_case(tmp_path: Path, events: list[Any]) -> tuple[Path, dict[str, int]]:
    """The profile, and each node span's encoded size (the names' first 6 characters)."""
    path = write(tmp_path / "budget.json", [model_run(0, 10_000), *events])
    everything = [d for d in drafts_of(path) if d.name != semconv.SPAN_RUN]
    return path, {d.name[:6]: ProtobufSpans().measure(d) for d in everything}


def emitted(drafts: list[SpanDraft]) -> list[str]:
    return sorted(d.name[:6] for d in drafts if d.name != semconv.SPAN_RUN)


def test_a_node_over_the_byte_budget_is_passed_over(tmp_path: Path) -> None:
    """Nodes are taken longest first; one whose bytes do not fit what is left is passed over,
    and shorter ones that fit are still taken."""
    events = [node_event(f"long_{k}_" + "x" * 300, "Conv", 10 + 40 * k, 30 - k) for k in range(3)]
    path, sizes = budget_case(tmp_path, [*events, node_event("short", "Relu", 500, 10)])
    budget = sizes["long_0"] + sizes["long_1"] + sizes["short"]
    drafts = drafts_of(path, options={"max_trace_bytes": budget})
    assert emitted(drafts) == ["long_0", "long_1", "short"]
    run = drafts[-1].attributes
    assert run[semconv.RUN_NODES_NOT_EMITTED] == 1
    assert run[semconv.RUN_NOT_EMITTED_LIMIT] == "max_trace_bytes"
    assert run[semconv.RUN_EMITTED_BYTES] == budget


def test_a_node_whose_kernels_cannot_fit_does_not_empty_the_trace(tmp_path: Path) -> None:
    """The longest node launched 100 kernels: more spans than the budget left could hold, so
    it is passed over unencoded, and the short nodes fill the budget."""
    kernels = [
        kernel_event(f"k{k}", "Conv", 11 + k, 1, parent_name="gpu_kernel_time") for k in range(100)
    ]
    shorts = [node_event(f"short{k}", "Relu", 500 + 10 * k, 5) for k in range(5)]
    path, _ = budget_case(tmp_path, [node_event("gpu", "Conv", 10, 200), *kernels, *shorts])
    drafts = drafts_of(path, options={"max_trace_bytes": 100 * 46})
    assert emitted(drafts) == [f"short{k}"[:6] for k in range(5)]
    assert drafts[-1].attributes[semconv.RUN_KERNELS_NOT_EMITTED] == 100


def test_after_eight_nodes_in_a_row_over_the_byte_budget_the_rest_are_not_tried(
    tmp_path: Path,
) -> None:
    """The budget counts as spent: a 10,000-node run does not encode thousands of nodes
    only to find that none fits."""
    big = [node_event(f"big_{k}_" + "x" * 2000, "Conv", 100 + 30 * k, 20 - k) for k in range(8)]
    events = [node_event("first", "Conv", 10, 50), *big, node_event("tiny", "Relu", 900, 1)]
    path, sizes = budget_case(tmp_path, events)
    drafts = drafts_of(path, options={"max_trace_bytes": sizes["first"] + sizes["tiny"]})
    assert emitted(drafts) == ["first"]  # tiny would fit, but comes after 8 that did not
    assert drafts[-1].attributes[semconv.RUN_NODES_NOT_EMITTED] == 9
    fewer = [node_event("first", "Conv", 10, 50), *big[:7], node_event("tiny", "Relu", 900, 1)]
    path, sizes = budget_case(tmp_path, fewer)
    drafts = drafts_of(path, options={"max_trace_bytes": sizes["first"] + sizes["tiny"]})
    assert emitted(drafts) == ["first", "tiny"]  # 7 in a row: tiny is still tried


def test_both_limits_apply_whichever_binds_first(profiles: dict[str, Path]) -> None:
    by_spans = drafts_of(
        profiles["session"], options={"max_node_spans": 5, "max_trace_bytes": 10**9}
    )
    by_bytes = drafts_of(
        profiles["session"], options={"max_node_spans": 10**6, "max_trace_bytes": 3000}
    )
    runs = [d for d in by_spans if d.name == semconv.SPAN_RUN]
    assert len(by_spans) == len(runs) * (1 + 5)
    assert all(semconv.RUN_NOT_EMITTED_LIMIT not in r.attributes for r in runs)  # as ever
    runs = [d for d in by_bytes if d.name == semconv.SPAN_RUN]
    assert all(r.attributes[semconv.RUN_NOT_EMITTED_LIMIT] == "max_trace_bytes" for r in runs)
    assert 0 < node_bytes(by_bytes) <= 3000 * len(runs)


def test_what_nobody_limits_is_all_there(profiles: dict[str, Path]) -> None:
    drafts = drafts_of(profiles["session"])
    runs = [d for d in drafts if d.name == semconv.SPAN_RUN]
    assert all(run.attributes[semconv.RUN_NODES_NOT_EMITTED] == 0 for run in runs)
    assert all(semconv.RUN_NOT_EMITTED_LIMIT not in run.attributes for run in runs)


def test_negative_zero_keeps_its_sign_after_positive_zero() -> None:
    """``-0.0 == 0.0``: the attribute cache must not hand one the other's bytes."""
    from otel_ort.export.otlp_encoding import _Attributes

    attributes = _Attributes(0x4A)
    positive = attributes.encode({"k": 0.0}, json_form=False)
    negative = attributes.encode({"k": -0.0}, json_form=False)
    assert positive != negative
    assert negative == _Attributes(0x4A).encode({"k": -0.0}, json_form=False)

"""Node span attributes encoded straight from ORT's args (cached per raw value) against the
general path: the dict ``node_attributes`` makes, encoded by ``ProtobufSpans``, and the SDK's
own encoding of the same spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.profiles import read_profile
from otel_ort.profiles.node_attributes import node_attributes
from otel_ort.profiles.node_encoding import NodeEncoder
from otel_ort.profiles.span_draft import DeferredAttributes, SpanDraft, readable
from otel_ort.profiles.spans import SpanBuilder
from tests.helpers.node_cases import RESOURCE, SEQUENCES, THREADS, direct, general, node
from tests.helpers.profiles import model_run, node_event, session_level_profile, write


@pytest.mark.parametrize("case", list(SEQUENCES))
def test_each_node_encodes_as_the_general_path_whatever_was_cached_before(case: str) -> None:
    encoder = NodeEncoder()
    for _ in range(2):  # cold, then every value cached
        for record, extra in SEQUENCES[case]:
            assert direct(encoder, record, extra) == general(record, extra), (record, extra)


def test_nodes_whose_attributes_could_collide_take_the_general_path() -> None:
    encoder = NodeEncoder()
    assert encoder.parts(node(node_index="1", graph_index="2"), None, None) is None
    assert encoder.parts(node(), {semconv.NODE_INDEX: 3}, None) is None
    assert encoder.parts(node(), {semconv.THREAD_ID: 3}, None) is None
    assert encoder.parts(node(output_size="1"), None, 6) is not None  # name to size: 6
    assert encoder.parts(node(output_size="1"), None, 5) is None  # span limits would cut


def test_deferred_attributes_are_the_dict_and_made_once() -> None:
    record = node(output_size="7", thread_scheduling_stats=THREADS)
    calls = []

    def make(*args: Any) -> dict[str, Any]:
        calls.append(args)
        return node_attributes(*args)

    deferred = DeferredAttributes(make, record, {"perf.a": 1})
    assert not calls
    assert dict(deferred) == node_attributes(record, {"perf.a": 1})
    assert deferred[semconv.NODE_NAME] == "n" and len(deferred) == len(deferred.resolved())
    assert list(deferred.items()) == list(node_attributes(record, {"perf.a": 1}).items())
    assert len(calls) == 1


def extreme_profile(directory: Path) -> Path:
    """Nodes whose args exercise every branch, repeated so that later ones hit the caches."""
    events: list[Any] = [model_run(0, 10_000)]
    variants: list[dict[str, Any]] = [
        {"output_size": "4096", "input_type_shape": [{"float": [1, 3]}, {"int64": [2]}]},
        {"output_size": 4096, "mem_arena": "9", "thread_scheduling_stats": THREADS},
        {"output_size": 4096.0, "activation_size": True, "output_type_shape": [{"f": [1.0]}]},
        {"parameter_size": "Infinity", "input_type_shape": [{"float": [None]}]},
        {"graph_index": "3", "node_index": "4"},
    ]
    for k in range(30):
        events.append(node_event(f"n{k % 7}", "Conv", 10 + 100 * k, 50 + k % 3, **variants[k % 5]))
    return write(directory / "extreme.json", events)


@pytest.mark.parametrize("source", ["real", "extreme"])
def test_built_spans_encode_as_the_sdk_encodes_them(tmp_path: Path, source: str) -> None:
    path = (
        session_level_profile(tmp_path, depth=10, runs=2)
        if source == "real"
        else extreme_profile(tmp_path)
    )
    builder = SpanBuilder(TracerProvider(resource=RESOURCE))
    profile = read_profile(path)
    for _ in range(2):  # the second time from the builder's caches
        drafts: list[SpanDraft] = []
        for run in profile.runs:
            extra: list[dict[str, AttributeValue]] = [
                {"perf.task-clock": k, "perf.x.by_thread": [k, 1]} for k in range(9)
            ]
            drafts += builder.run_drafts(profile, run, node_extra=extra)
        assert any(isinstance(draft.attributes, DeferredAttributes) for draft in drafts)
        encoder = ProtobufSpans()
        request = ExportTraceServiceRequest()
        spans = b"".join(encoder.span(draft) for draft in drafts)
        request.ParseFromString(encoder.request([(RESOURCE, drafts[0].scope, spans)]))
        assert request == encode_spans([readable(draft) for draft in drafts])
        # OTLP/JSON reads the deferred attributes as a dict
        plain = [_with_dict(draft) for draft in drafts]
        assert [JsonSpans().span(d) for d in drafts] == [JsonSpans().span(d) for d in plain]
        assert json.loads(JsonSpans().span(drafts[0]))


def _with_dict(draft: SpanDraft) -> SpanDraft:
    copy = SpanDraft(
        draft.trace_id, draft.span_id, draft.parent_id, draft.name, draft.start, draft.end,
        dict(draft.attributes), draft.resource, draft.scope, draft.dropped_attributes,
        draft.links, draft.parent_remote,
    )  # fmt: skip
    return copy

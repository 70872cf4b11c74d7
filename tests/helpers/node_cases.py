"""Nodes whose args exercise every branch of the node encoder, and the two ways to encode
them (the encoder's own, and the general path it must equal)."""

from __future__ import annotations

import math
from typing import Any

from opentelemetry.sdk.resources import Resource

from otel_ort._util.text_limits import clip
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.profiles import NodeRecord
from otel_ort.profiles.node_attributes import node_attributes
from otel_ort.profiles.node_encoding import NodeEncoder
from otel_ort.profiles.span_draft import SpanDraft

RESOURCE = Resource.create({"service.name": "nodes"})
THREADS: dict[str, Any] = {
    "main_thread": {"thread_pool_name": "pool", "Run": "12", "Wait": 3},
    "sub_threads": {"1": {"num_run": 2}, "2": {"num_run": "0"}, "3": "not a dict"},
}


def node(name: str = "n", dur: float = 5, tid: Any = 7, **args: Any) -> NodeRecord:
    return NodeRecord(
        ts=10, dur=dur, name=name, op_type="Conv", provider="CPU", tid=tid, args=dict(args)
    )


def general(record: NodeRecord, extra: dict[str, Any] | None = None) -> bytes:
    """The span as the general path encodes it: the dict, then ``ProtobufSpans`` (the span
    builder clips the name)."""
    attributes = node_attributes(record, extra)
    draft = SpanDraft(1, 2, 3, clip(record.name), 10, 20, attributes, RESOURCE, None)
    return ProtobufSpans().span(draft)


def direct(encoder: NodeEncoder, record: NodeRecord, extra: dict[str, Any] | None = None) -> bytes:
    parts = encoder.parts(record, extra, None)
    assert parts is not None
    draft = SpanDraft(1, 2, 3, record.name, 10, 20, {}, RESOURCE, None)
    draft.encoded = parts
    return ProtobufSpans().span(draft)


# each list is encoded in order by one encoder: what an earlier node cached must not leak
SEQUENCES: dict[str, list[tuple[NodeRecord, dict[str, Any] | None]]] = {
    "equal values of other types": [
        (node(output_size="1", activation_size=1), None),
        (node(output_size=1.0, activation_size="1"), None),
        (node(output_size=True, activation_size=1.9), None),
        (node(output_size="1"), None),
    ],
    "one value for two keys": [
        (node(output_size="4096", parameter_size="4096", mem_in_use="4096"), None),
        (node(parameter_size="4096", output_size="4096"), None),
    ],
    "numbers OTLP cannot carry": [
        (node(output_size="Infinity", parameter_size=str(2**70), activation_size="1.5"), None),
        (node(output_size=math.inf, parameter_size=2**70, mem_x="-3"), None),
    ],
    "shapes": [
        (node(input_type_shape=[{"float": [1, 3]}], output_type_shape=[{"float": [1, 3]}]), None),
        (node(input_type_shape=[{"float": [1.0, 3]}], output_type_shape=[{"float": [True]}]), None),
        (node(input_type_shape=[{"f": [math.nan]}], output_type_shape=[{"f": [None]}]), None),
        (node(input_type_shape=[{"int64": [2]}] * 20, output_type_shape="not a list"), None),
        (node(input_type_shape=[], output_type_shape=[{"f": "x"}, 3, {"a": [], "b": [2]}]), None),
        (node(input_type_shape=[{"float": [2**70]}]), None),
    ],
    "thread stats": [
        (node(thread_scheduling_stats=THREADS), None),
        (node(thread_scheduling_stats={"main_thread": {"Run": "x", "Wait": True}}), None),
        (node(thread_scheduling_stats={"sub_threads": {}}), None),
        (node(thread_scheduling_stats="not a dict"), None),
    ],
    "durations and threads": [
        (node(dur=5), None),
        (node(dur=5.0), None),
        (node(dur=0), None),
        (node(dur=-0.0), None),
        (node(dur=0.5, tid=None), None),
        (node(tid="12"), None),
        (node(tid=True), None),
    ],
    "names and text": [
        (node(name="x" * 2000), None),
        (node(name="ü \ud800"), None),
        (node(name="ü \ud800"), None),
    ],
    "extra attributes": [
        (node(), {"perf.a": 1, "perf.b": [1, 2], "perf.c": 1.5, "perf.d": True}),
        (node(), {"perf.a": True, "perf.b": [True, 2], "perf.c": 1, "perf.d": 1}),
        (node(), {"perf.a": 1.0, "perf.b": (1, 2), "perf.c": [], "perf.d": ["x"]}),
        (node(), {"perf.a": 2**70, "perf.b": [2**70], "perf.e": None, "perf.f": object()}),
        (node(), {"perf.a": 1, "perf.b": [1, 2], "perf.not_counted": ["x"]}),
    ],
}

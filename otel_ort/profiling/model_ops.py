"""The operators of an ONNX model, read straight from its protobuf encoding (no ``onnx``
package needed), to find those a twin cannot reproduce: random number generators.

A twin is a second copy of ORT whose random state is its own: ``onnxruntime.set_seed()``
does not reach it, and a seeded kernel's sequence advances with that copy's runs. So a model
with a random op gets no twin; its runs say so.
"""

from __future__ import annotations

import mmap
import os

from otel_ort.onnx_wire import ORT_FORMAT_ID, fields

RANDOM_OPS = frozenset(
    {
        ("", "RandomNormal"),
        ("", "RandomNormalLike"),
        ("", "RandomUniform"),
        ("", "RandomUniformLike"),
        ("", "Multinomial"),
        ("", "Bernoulli"),
        ("com.microsoft", "BiasDropout"),
        ("com.microsoft", "BitmaskDropout"),
        ("com.microsoft", "BitmaskBiasDropout"),
        ("com.microsoft", "Sampling"),
    }
)
"""(domain, op type) of the operators whose outputs are random (``ai.onnx`` spelled ``""``);
``Dropout`` too when its ``training_mode`` input is given."""

# field numbers in onnx.proto
_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE = 1
_FUNCTION_NODE = 7
_NODE_INPUT, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 4, 5, 7
_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 6, 11


class UnreadableModel(ValueError):
    """The model's operators cannot be listed; the message says why."""


def random_ops(model: str | bytes) -> list[str]:
    """The random operators of ``model`` (a path or the serialized model), subgraphs and
    model-local functions included, as ``domain:op_type`` (``ai.onnx`` ones bare)."""
    if isinstance(model, bytes):
        return _random_ops(model)
    with open(model, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if not size:
            raise UnreadableModel("the model file is empty")
        # read into anonymous memory, not mapped from the file (a file cut meanwhile would
        # be a SIGBUS) nor malloc'ed (freeing megabytes raises glibc's mmap threshold: the
        # process's later allocations would fault differently, which perf would count)
        with mmap.mmap(-1, size) as buffer:
            read = file.readinto(buffer)
            return _random_ops(buffer, read)


def _random_ops(raw: bytes | mmap.mmap, size: int | None = None) -> list[str]:
    """``random_ops`` of the first ``size`` bytes of ``raw`` (all of them by default)."""
    size = len(raw) if size is None else size
    if raw[4:8] == ORT_FORMAT_ID:  # FlatBuffers, not read here: any mention counts
        return sorted(op for _, op in RANDOM_OPS if raw.find(op.encode(), 0, size) >= 0)
    found: set[str] = set()
    problem = ""
    with memoryview(raw) as whole, whole[:size] as data:
        try:
            _model(data, found)
        except IndexError as exc:  # no traceback kept: it would hold views of ``raw``
            problem = str(exc)
    if problem:
        raise UnreadableModel(f"its protobuf encoding cannot be read: {problem}")
    return sorted(found)


def _model(data: memoryview, found: set[str]) -> None:
    for field, start, end in fields(data, 0, len(data)):
        if field == _MODEL_GRAPH:
            _graph(data, start, end, _GRAPH_NODE, found)
        elif field == _MODEL_FUNCTIONS:
            _graph(data, start, end, _FUNCTION_NODE, found)


def _graph(data: memoryview, start: int, end: int, node_field: int, found: set[str]) -> None:
    """Check the nodes of a GraphProto (or a FunctionProto's, ``node_field`` 7)."""
    for field, node_start, node_end in fields(data, start, end):
        if field != node_field:
            continue
        op_type = domain = ""
        inputs: list[bytes] = []
        for node_field_number, value_start, value_end in fields(data, node_start, node_end):
            value = data[value_start:value_end]
            if node_field_number == _NODE_OP_TYPE:
                op_type = bytes(value).decode(errors="replace")
            elif node_field_number == _NODE_DOMAIN:
                domain = bytes(value).decode(errors="replace")
            elif node_field_number == _NODE_INPUT:
                inputs.append(bytes(value))
            elif node_field_number == _NODE_ATTRIBUTE:
                for attribute_field, g_start, g_end in fields(data, value_start, value_end):
                    if attribute_field in (_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS):
                        _graph(data, g_start, g_end, _GRAPH_NODE, found)
        domain = "" if domain == "ai.onnx" else domain
        training = op_type == "Dropout" and domain == "" and len(inputs) > 2 and inputs[2]
        if (domain, op_type) in RANDOM_OPS or training:
            found.add(f"{domain}:{op_type}" if domain else op_type)

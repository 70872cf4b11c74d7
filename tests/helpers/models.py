"""Small real ONNX models built with onnx.helper for the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import GraphProto, TensorProto, helper


def numeric_types_model() -> bytes:
    """Inputs of four element types (float, int64, bool, float16), each through an op of its own."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
        helper.make_tensor_value_info("i", TensorProto.INT64, ["n"]),
        helper.make_tensor_value_info("b", TensorProto.BOOL, ["n"]),
        helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["n"]),
    ]
    outputs = [
        helper.make_tensor_value_info("relu", TensorProto.FLOAT, ["n"]),
        helper.make_tensor_value_info("neg", TensorProto.INT64, ["n"]),
        helper.make_tensor_value_info("not", TensorProto.BOOL, ["n"]),
        helper.make_tensor_value_info("half", TensorProto.FLOAT16, ["n"]),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["relu"], name="relu"),
        helper.make_node("Neg", ["i"], ["neg"], name="neg"),
        helper.make_node("Not", ["b"], ["not"], name="not"),
        helper.make_node("Abs", ["h"], ["half"], name="abs"),
    ]
    return _serialize(helper.make_graph(nodes, "numeric", inputs, outputs))


def string_model() -> bytes:
    """A string tensor in, the same out (OrtValues cannot hold strings, so only some run APIs)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["same"], name="same")],
        "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, ["n"])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, ["n"])],
    )
    return _serialize(graph)


def typed_cases() -> list[tuple[bytes, dict[str, Any]]]:
    """The two models above with feeds of every type they take: float, int64, bool, float16
    and string tensors, for checks that outputs are bitwise ORT's."""
    rng = np.random.default_rng(7)
    numeric = {
        "x": rng.standard_normal(50).astype(np.float32),
        "i": rng.integers(-9, 9, 50),
        "b": rng.random(50) > 0.5,
        "h": rng.standard_normal(50).astype(np.float16),
    }
    strings = {"s": np.array(["a", "bé", "", "long " * 20], dtype=object)}
    return [(numeric_types_model(), numeric), (string_model(), strings)]


def unary_model(op: str) -> bytes:
    """One float op, ``x`` to ``y``: two models with the same signature and different results."""
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name=op.lower())],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    return _serialize(graph)


def unused_input_model() -> bytes:
    """Inputs ``a`` and ``b``, where ``b`` feeds no node: ORT's Python API still requires it."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["y"], name="neg")],
        "unused_input",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    return _serialize(graph)


def reshape_model() -> bytes:
    """``x`` (4 floats) reshaped to the shape input ``s``: a shape that does not hold 4 fails
    the run itself (ORT's FAIL), after its inputs were taken."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
        "reshape",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return _serialize(graph)


def float_and_bfloat16_model() -> bytes:
    """``x`` to ``y = Relu(x)`` (float) and ``z = Cast(x, bfloat16)``, an output that ORT's Python
    API cannot return (there is no numpy bfloat16)."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name="relu"),
            helper.make_node("Cast", ["x"], ["z"], name="cast", to=TensorProto.BFLOAT16),
        ],
        "float_and_bfloat16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("z", TensorProto.BFLOAT16, ["n"]),
        ],
    )
    return _serialize(graph)


def _serialize(graph: GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    data: bytes = model.SerializeToString()
    return data

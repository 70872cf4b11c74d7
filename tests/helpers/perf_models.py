"""Models for the perf-counter tests: heavy nodes, and nodes that fault."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper


def matmul_chain(nodes: int = 8, size: int = 512) -> bytes:
    """``nodes`` MatMuls of [size, size] in a chain: a few ms of CPU each."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.random((size, size)) / size).astype(np.float32), f"w{i}")
        for i in range(nodes)
    ]
    graph_nodes = [
        helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"], f"mm{i}")
        for i in range(nodes)
    ]
    return _model(graph_nodes, weights, [size, size], f"h{nodes - 1}")


def branches(count: int = 4, size: int = 256) -> bytes:
    """``count`` independent MatMuls of ``x`` summed: the parallel executor overlaps them."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.random((size, size)).astype(np.float32), f"w{i}")
        for i in range(count)
    ]
    graph_nodes = [
        helper.make_node("MatMul", ["x", f"w{i}"], [f"b{i}"], f"mm{i}") for i in range(count)
    ]
    graph_nodes.append(helper.make_node("Sum", [f"b{i}" for i in range(count)], ["y"], "sum"))
    return _model(graph_nodes, weights, [size, size], "y")


def add_chain(elements: int, nodes: int = 8) -> bytes:
    """``nodes`` Adds over ``elements`` floats: with the arena off, each output is a fresh
    allocation whose pages fault when first written."""
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    graph_nodes = [
        helper.make_node("Add", ["x" if i == 0 else f"h{i - 1}", "one"], [f"h{i}"], f"add{i}")
        for i in range(nodes)
    ]
    return _model(graph_nodes, [one], [elements], f"h{nodes - 1}")


def _model(
    nodes: list[NodeProto], initializers: list[TensorProto], shape: list[int], output: str
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "perf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return bytes(model.SerializeToString())

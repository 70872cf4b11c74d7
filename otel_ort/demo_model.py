"""The embedded default model of the demo and the benchmarks: a small multi-layer perceptron.

Built in memory with the ``onnx`` package (``pip install 'otel-ort[demo]'``), with fixed-seed
weights, so every machine gets the same model without downloading anything.
"""

from __future__ import annotations

import numpy as np


def mlp_model(width: int = 256, depth: int = 4, seed: int = 0) -> bytes:
    """Serialized ONNX ``y = MLP(x)``: ``depth`` x (MatMul, Add, Relu), ``x: float32[N, width]``."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:
        raise RuntimeError(
            "the demo model is built with the onnx package: pip install 'otel-ort[demo]'"
        ) from exc
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    current = "x"
    for layer in range(depth):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        bias = (rng.standard_normal(width) * 0.1).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"w{layer}"),
            numpy_helper.from_array(bias, f"b{layer}"),
        ]
        out = "y" if layer == depth - 1 else f"h{layer}"
        nodes += [
            helper.make_node(
                "MatMul", [current, f"w{layer}"], [f"mm{layer}"], name=f"matmul_{layer}"
            ),
            helper.make_node(
                "Add", [f"mm{layer}", f"b{layer}"], [f"add{layer}"], name=f"add_{layer}"
            ),
            helper.make_node("Relu", [f"add{layer}"], [out], name=f"relu_{layer}"),
        ]
        current = out
    graph = helper.make_graph(
        nodes,
        f"mlp_{depth}x{width}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=9,  # ORT 1.20+ reads IR 9; newer onnx would default to a newer IR
        producer_name="otel-ort",
    )
    onnx.checker.check_model(model)
    serialized: bytes = model.SerializeToString()
    return serialized

"""Small real ONNX models of many value types (strings, sequences, maps, optionals, subgraphs),
built with onnx.helper."""

from __future__ import annotations

from typing import Any

import onnx
from onnx import GraphProto, TensorProto, TypeProto, helper

T = TensorProto


def _model(graph: GraphProto, opset: int = 17, ml: bool = False) -> bytes:
    opsets = [helper.make_opsetid("", opset)]
    if ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", 3))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    data: bytes = model.SerializeToString()
    return data


def _tensor(name: str, element: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, element, shape)


def _value(name: str, type_proto: TypeProto) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, type_proto)


def arithmetic(element: int) -> bytes:
    """``same = a``, ``sum = a + b``, ``cat = concat(a, b)`` on one element type."""
    nodes = [
        helper.make_node("Identity", ["a"], ["same"]),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "arithmetic",
        [_tensor("a", element, ["n", 3]), _tensor("b", element, ["n", 3])],
        [
            _tensor(name, element, [dim, 3])
            for name, dim in (("same", "n"), ("sum", "n"), ("cat", "k"))
        ],
    )
    return _model(graph)


def logic() -> bytes:
    """Bool tensors: ``not a``, ``a and b``."""
    graph = helper.make_graph(
        [helper.make_node("Not", ["a"], ["not"]), helper.make_node("And", ["a", "b"], ["and"])],
        "logic",
        [_tensor("a", T.BOOL, ["n"]), _tensor("b", T.BOOL, ["n"])],
        [_tensor("not", T.BOOL, ["n"]), _tensor("and", T.BOOL, ["n"])],
    )
    return _model(graph)


def strings() -> bytes:
    """String tensors: identity, upper-cased, and concatenated with ``t``."""
    nodes = [
        helper.make_node("Identity", ["s"], ["same"]),
        helper.make_node(
            "StringNormalizer", ["s"], ["upper"], case_change_action="UPPER", locale="C"
        ),
        helper.make_node("Concat", ["s", "t"], ["cat"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "strings",
        [_tensor("s", T.STRING, ["n"]), _tensor("t", T.STRING, ["m"])],
        [
            _tensor("same", T.STRING, ["n"]),
            _tensor("upper", T.STRING, ["u"]),
            _tensor("cat", T.STRING, ["k"]),
        ],
    )
    return _model(graph)


def constant_strings(values: list[bytes]) -> bytes:
    """No input; output ``y``: the string tensor ``values``, raw bytes as stored in the model."""
    value = helper.make_tensor("c", T.STRING, [len(values)], values)  # type: ignore[arg-type]
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=value)],
        "constant_strings",
        [],
        [_tensor("y", T.STRING, [len(values)])],
    )
    return _model(graph)


def reductions() -> bytes:
    """``total``: a 0-d sum; ``relu``: elementwise (keeps empty shapes)."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Relu", ["x"], ["relu"]),
        ],
        "reductions",
        [_tensor("x", T.FLOAT, ["n", 3])],
        [_tensor("total", T.FLOAT, []), _tensor("relu", T.FLOAT, ["n", 3])],
    )
    return _model(graph)


def casts(element: int) -> bytes:
    """``y = Cast(x, to=element)`` (opset 21, so float8 and bfloat16 are allowed)."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=element)],
        "cast",
        [_tensor("x", T.FLOAT, [4])],
        [_tensor("y", element, [4])],
    )
    return _model(graph, opset=21)


def branch() -> bytes:
    """``If(cond)``: then ``x + 1``, else ``x * 2``."""
    one = helper.make_tensor("one", T.FLOAT, [], [1.0])
    two = helper.make_tensor("two", T.FLOAT, [], [2.0])
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["then_y"])],
        "then",
        [],
        [_tensor("then_y", T.FLOAT, ["n"])],
        initializer=[one],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["else_y"])],
        "else",
        [],
        [_tensor("else_y", T.FLOAT, ["n"])],
        initializer=[two],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)],
        "branch",
        [_tensor("cond", T.BOOL, []), _tensor("x", T.FLOAT, ["n"])],
        [_tensor("y", T.FLOAT, ["n"])],
    )
    return _model(graph)


def loop() -> bytes:
    """``Loop`` over ``trips`` iterations: running sum of ``x`` and every partial sum."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["partial"]),
        ],
        "body",
        [
            _tensor("i", T.INT64, []),
            _tensor("cond_in", T.BOOL, []),
            _tensor("acc_in", T.FLOAT, [3]),
        ],
        [
            _tensor("cond_out", T.BOOL, []),
            _tensor("acc_out", T.FLOAT, [3]),
            _tensor("partial", T.FLOAT, [3]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "start"], ["total", "partials"], body=body)],
        "loop",
        [
            _tensor("trips", T.INT64, []),
            _tensor("start", T.FLOAT, [3]),
            _tensor("x", T.FLOAT, [3]),
        ],
        [_tensor("total", T.FLOAT, [3]), _tensor("partials", T.FLOAT, ["k", 3])],
    )
    return _model(graph)


def scan() -> bytes:
    """``Scan`` over the rows of ``rows``: cumulative sums, and the final sum."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["cumulative"]),
        ],
        "body",
        [_tensor("acc_in", T.FLOAT, [2]), _tensor("row", T.FLOAT, [2])],
        [_tensor("acc_out", T.FLOAT, [2]), _tensor("cumulative", T.FLOAT, [2])],
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "Scan", ["start", "rows"], ["total", "cumulative"], body=body, num_scan_inputs=1
            )
        ],
        "scan",
        [_tensor("start", T.FLOAT, [2]), _tensor("rows", T.FLOAT, ["n", 2])],
        [_tensor("total", T.FLOAT, [2]), _tensor("cumulative", T.FLOAT, ["n", 2])],
    )
    return _model(graph)


def sequences() -> bytes:
    """``rows``: ``x`` split into a sequence; ``pair``: a sequence of string tensors."""
    graph = helper.make_graph(
        [
            helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0),
            helper.make_node("SequenceConstruct", ["s", "s"], ["pair"]),
        ],
        "sequences",
        [_tensor("x", T.FLOAT, ["n", 2]), _tensor("s", T.STRING, ["m"])],
        [
            helper.make_tensor_sequence_value_info("rows", T.FLOAT, None),
            helper.make_tensor_sequence_value_info("pair", T.STRING, None),
        ],
    )
    return _model(graph)


def zipmap(labels: list[int] | list[str]) -> bytes:
    """ai.onnx.ml ``ZipMap`` of softmax scores: ``seq(map(int64|string, float))``."""
    key = T.STRING if isinstance(labels[0], str) else T.INT64
    attribute: dict[str, Any] = {
        "classlabels_strings" if key == T.STRING else "classlabels_int64s": labels
    }
    scores = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(T.FLOAT, []))
    )
    graph = helper.make_graph(
        [
            helper.make_node("Softmax", ["x"], ["p"], axis=1),
            helper.make_node("ZipMap", ["p"], ["scores"], domain="ai.onnx.ml", **attribute),
        ],
        "zipmap",
        [_tensor("x", T.FLOAT, ["n", len(labels)])],
        [_value("scores", scores)],
    )
    return _model(graph, ml=True)


def optionals() -> bytes:
    """``none``: an empty ``optional(tensor(float))``; ``some``: one holding ``x``."""
    float_type = helper.make_tensor_type_proto(T.FLOAT, [2])
    optional = helper.make_optional_type_proto(float_type)
    graph = helper.make_graph(
        [
            helper.make_node("Optional", [], ["none"], type=float_type),
            helper.make_node("Optional", ["x"], ["some"]),
        ],
        "optionals",
        [_tensor("x", T.FLOAT, [2])],
        [_value("none", optional), _value("some", optional)],
    )
    return _model(graph, opset=18)


def typed_inputs() -> bytes:
    """Inputs of every kind (tensor, seq, map, optional), for the type strings."""
    float_tensor = helper.make_tensor_type_proto(T.FLOAT, None)
    inputs = [
        _tensor("tensor", T.FLOAT16, [1]),
        _value("seq", helper.make_sequence_type_proto(float_tensor)),
        _value(
            "map",
            helper.make_map_type_proto(T.INT64, helper.make_tensor_type_proto(T.DOUBLE, [])),
        ),
        _value("optional", helper.make_optional_type_proto(float_tensor)),
    ]
    nodes = [
        helper.make_node("Identity", ["tensor"], ["o_tensor"]),
        helper.make_node("SequenceLength", ["seq"], ["o_seq"]),
        helper.make_node("DictVectorizer", ["map"], ["o_map"], domain="ai.onnx.ml",
                         int64_vocabulary=[1, 2]),
        helper.make_node("OptionalHasElement", ["optional"], ["o_optional"]),
    ]  # fmt: skip
    outputs = [
        _tensor("o_tensor", T.FLOAT16, [1]),
        _tensor("o_seq", T.INT64, []),
        _tensor("o_map", T.DOUBLE, [1, 2]),
        _tensor("o_optional", T.BOOL, []),
    ]
    return _model(helper.make_graph(nodes, "typed", inputs, outputs), opset=18, ml=True)

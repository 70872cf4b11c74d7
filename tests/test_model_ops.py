"""Random operators found in ONNX models read from their protobuf encoding, and the sessions
whose models have them left without a twin (its random numbers would be its own)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.profiling.model_ops import UnreadableModel, random_ops
from tests.conftest import Telemetry, attrs, instrumentation
from tests.models import unary_model

FLOAT = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], **kwargs: object) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [2])],
        [helper.make_tensor_value_info("y", FLOAT, [2])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10, **kwargs)
    return bytes(model.SerializeToString())


def random_like() -> bytes:
    return _model([helper.make_node("RandomUniformLike", ["x"], ["y"])])


def random_in_a_branch() -> bytes:
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x"], ["out"])],
            op,
            [],
            [helper.make_tensor_value_info("out", FLOAT, [2])],
        )

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node(
            "If",
            ["c"],
            ["y"],
            then_branch=branch("Abs"),
            else_branch=branch("RandomNormalLike"),
        ),
    ]
    zero = helper.make_node("Constant", [], ["zero"], value_float=0.0)
    return _model([zero, *nodes])


def bernoulli_in_a_function() -> bytes:
    function = helper.make_function(
        "local", "Draw", ["a"], ["b"], [helper.make_node("Bernoulli", ["a"], ["b"])], []
    )
    node = helper.make_node("Draw", ["x"], ["y"], domain="local")
    return _model([node], functions=[function])


def dropout(training: bool) -> bytes:
    inputs = ["x", "ratio", "training"] if training else ["x"]
    constants = [
        helper.make_node("Constant", [], ["ratio"], value_float=0.5),
        helper.make_node("Constant", [], ["training"], value_int=1),
    ]
    return _model([*constants, helper.make_node("Dropout", inputs, ["y"])])


@pytest.mark.parametrize(
    ("model", "found"),
    [
        (unary_model("Neg"), []),
        (random_like(), ["RandomUniformLike"]),
        (random_in_a_branch(), ["RandomNormalLike"]),
        (bernoulli_in_a_function(), ["Bernoulli"]),
        (dropout(training=True), ["Dropout"]),
        (dropout(training=False), []),
    ],
    ids=["none", "op", "subgraph", "function", "training-dropout", "inference-dropout"],
)
def test_random_operators_are_found_in_bytes_and_files(
    tmp_path: Path, model: bytes, found: list[str]
) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    assert random_ops(model) == random_ops(str(path)) == found


def test_a_cut_model_or_an_empty_file_cannot_be_read(tmp_path: Path) -> None:
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(random_like()[:-3])
    for model in (cut.read_bytes(), str(cut)):
        with pytest.raises(UnreadableModel, match="cannot be read: field runs past its message"):
            random_ops(model)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(UnreadableModel, match="empty"):
        random_ops(str(tmp_path / "empty.onnx"))


def test_a_protobuf_group_deep_in_a_model_file_is_unreadable(tmp_path: Path) -> None:
    node = b"\x22\x01X" + b"\x2b"  # op_type "X", then a field of wire type 3 (a group)
    graph = b"\x0a" + bytes([len(node)]) + node
    path = tmp_path / "group.onnx"
    path.write_bytes(b"\x3a" + bytes([len(graph)]) + graph)
    with pytest.raises(UnreadableModel, match="wire type 3"):
        random_ops(str(path))


def test_an_ort_format_model_counts_any_mention_of_a_random_operator() -> None:
    header = b"\x10\x00\x00\x00ORTM"
    assert random_ops(header + b"...Multinomial...") == ["Multinomial"]
    assert random_ops(header + b"...MatMul...") == []


def test_a_session_whose_model_draws_random_numbers_gets_no_twin(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """Its runs stay ORT's, so ``onnxruntime.set_seed`` keeps them reproducible."""
    x = {"x": np.ones(2, np.float32)}
    with instrumentation(**telemetry.providers, profile_dir=str(tmp_path)):
        session = ort.InferenceSession(random_like(), providers=["CPUExecutionProvider"])
        for _ in range(2):
            with profile_next_run():
                session.run(None, x)
            assert flush_profiles(timeout=60)
    run = attrs(telemetry.spans(semconv.SPAN_RUN)[-1])
    assert run[semconv.PROFILE_SKIP_REASON] == semconv.SKIP_TWIN_UNAVAILABLE
    assert "random operators (RandomUniformLike)" in str(run[semconv.PROFILE_SKIP_DETAIL])

"""The rapidocr models in the shape the FastAPI example serves: one float32 input
``[batch, features]`` and a two-dimensional output.

The OCR models take images ``[batch, 3, H, W]``, which the example's JSON rows cannot carry.
The closest honest setup: the unchanged model behind one ``Reshape`` node that turns each row
back into its image, and for the recogniser (whose output is ``[batch, steps, 6625]``
character probabilities) an ``ArgMax`` over the characters, the greedy CTC decoding rapidocr
itself does next in numpy. Everything else in the graph is the wheel's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bench.wheel_models import OCR_MODELS, WheelModel, fetch

FEATURES_INPUT = "features"


@dataclass(frozen=True)
class ServedModel:
    """A wheel model served by the example: its image shape and whether its output is decoded
    to the most likely character per step."""

    key: str
    source: WheelModel
    decode: bool

    @property
    def features(self) -> int:
        """Floats per request row: the image ``[3, H, W]`` flattened."""
        return math.prod(self.source.shape[1:])


SERVED_MODELS = {
    "cls": ServedModel("cls", OCR_MODELS[0], decode=False),  # 235 nodes after ORT's fusions
    "rec": ServedModel("rec", OCR_MODELS[1], decode=True),  # 415 nodes
}


def flat_model(served: ServedModel, cache: Path) -> Path:
    """``served``'s model with a ``[batch, features]`` input (and decoded output), written
    next to the wheel's model in ``cache`` once."""
    target = cache / f"{served.source.name}_flat.onnx"
    if target.exists():
        return target
    model = onnx.load(str(fetch(served.source, cache)))
    graph = model.graph
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ValueError(f"{served.source.name}: expected one input and one output")
    image = graph.input[0]
    _, channels, height, width = served.source.shape
    shape = numpy_helper.from_array(
        np.array([-1, channels, height, width], dtype=np.int64), "features_to_image_shape"
    )
    graph.initializer.append(shape)
    reshape = helper.make_node("Reshape", [FEATURES_INPUT, shape.name], [image.name])
    graph.node.insert(0, reshape)
    flat = helper.make_tensor_value_info(
        FEATURES_INPUT, onnx.TensorProto.FLOAT, ["batch", served.features]
    )
    graph.input.remove(image)
    graph.input.append(flat)
    if served.decode:
        probabilities = graph.output[0]
        decoded = helper.make_node("ArgMax", [probabilities.name], ["char_ids"], axis=2, keepdims=0)
        graph.node.append(decoded)
        graph.output.remove(probabilities)
        graph.output.append(
            helper.make_tensor_value_info("char_ids", onnx.TensorProto.INT64, ["batch", "steps"])
        )
    onnx.checker.check_model(model)
    partial = target.with_name(f"{target.name}.partial")
    onnx.save(model, str(partial))
    partial.replace(target)
    return target


def request_body(served: ServedModel, seed: int = 0) -> bytes:
    """A ``/predict`` JSON body of one row: seeded pixels in [0, 1), three decimals."""
    row = np.round(np.random.default_rng(seed).random(served.features), 3)
    return json.dumps({"inputs": [row.tolist()]}, separators=(",", ":")).encode()

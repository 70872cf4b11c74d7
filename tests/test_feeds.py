"""Input descriptions: real numpy arrays and OrtValues, bounded in count."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from otel_ort.feeds import MAX_DESCRIBED_INPUTS, describe_feeds, describe_value


def test_numpy_and_ortvalue_descriptions_agree() -> None:
    array = np.zeros((64, 256), np.float32)
    assert describe_value("x", array) == "x:float32[64,256]"
    assert describe_value("x", ort.OrtValue.ortvalue_from_numpy(array)) == "x:float32[64,256]"
    assert describe_value("s", np.float64(1.0)) == "s:float64[]"
    assert describe_value("l", [1, 2]) == "l:list"


def test_many_inputs_are_bounded() -> None:
    feeds = {f"in{k}": np.zeros(k, np.int8) for k in range(100)}
    described = describe_feeds(feeds)
    assert len(described) == MAX_DESCRIBED_INPUTS + 1
    assert described[0] == "in0:int8[0]"
    assert described[-1] == f"+{100 - MAX_DESCRIBED_INPUTS} more"

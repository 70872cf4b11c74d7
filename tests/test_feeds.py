"""Input descriptions: real numpy arrays and OrtValues, bounded in count."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from otel_ort.instrumentation.feeds import MAX_DESCRIBED_INPUTS, describe_feeds, describe_value


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


class _ShapedLikeAList:
    """Array-like, with a shape that cannot be hashed."""

    def __init__(self) -> None:
        self.dtype = np.dtype(np.int32)
        self.shape = [2, 3]


def test_described_feeds_agree_with_each_value_described() -> None:
    """The cache hit that describe_feeds takes for arrays gives what describe_value gives, for
    every kind of value, on the first run and on the next (cached) one."""
    array = np.zeros((2, 3), np.float32)
    feeds = {
        "a": array,
        "b": ort.OrtValue.ortvalue_from_numpy(array),
        "c": [1, 2],
        "d": _ShapedLikeAList(),
        "e": array.astype(">f4"),
        "f": array[:1],
    }
    each = tuple(describe_value(name, value) for name, value in feeds.items())
    assert each == (
        "a:float32[2,3]",
        "b:float32[2,3]",
        "c:list",
        "d:int32[2,3]",
        "e:>f4[2,3]",
        "f:float32[1,3]",
    )
    assert describe_feeds(feeds) == each
    assert describe_feeds(feeds) == each

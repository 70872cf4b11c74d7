"""Describe a run's inputs as ``name:dtype[dims]`` strings, without touching tensor contents."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

MAX_DESCRIBED_INPUTS = 64
"""Inputs beyond this many are summarised as one ``+N more`` entry (bounded attribute size)."""

# ONNX element type names as ORT prints them (``tensor(float)``) → numpy's names
_ONNX_TO_NUMPY = {
    "float": "float32",
    "double": "float64",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "string": "str",
}


def describe_feeds(pairs: Iterable[tuple[Any, Any]], count: int) -> tuple[str, ...]:
    """``count`` ``(name, value)`` pairs → ``("x:float32[64,256]", ...)``, bounded in length."""
    if count <= MAX_DESCRIBED_INPUTS:
        return tuple([describe_value(name, value) for name, value in pairs])
    described = [describe_value(name, value) for name, value in islice(pairs, MAX_DESCRIBED_INPUTS)]
    described.append(f"+{count - MAX_DESCRIBED_INPUTS} more")
    return tuple(described)


_DESCRIPTIONS: dict[tuple[str, Any, Any], str] = {}
_MAX_DESCRIPTIONS = 4096
"""Descriptions of recently seen (name, dtype, shape): formatting a dtype takes ~3 us, and
reusing the string also spares the exporter's queue a new object per run."""


def describe_value(name: str, value: Any) -> str:
    """One input as ``name:dtype[dims]``; ``name:<type>`` for values that are not tensors."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:  # numpy array or anything array-like
        shape = value.shape
        try:
            key = (name, dtype, shape)
            described = _DESCRIPTIONS.get(key)
        except TypeError:  # unhashable dtype or shape
            return f"{name}:{dtype}[{','.join(map(str, shape))}]"
        if described is None:
            described = f"{name}:{dtype}[{','.join(map(str, shape))}]"
            if len(_DESCRIPTIONS) >= _MAX_DESCRIPTIONS:
                _DESCRIPTIONS.clear()
            _DESCRIPTIONS[key] = described
        return described
    data_type = getattr(value, "data_type", None)
    if callable(data_type):  # onnxruntime.OrtValue and its C++ counterpart
        onnx_type = str(data_type())
        if onnx_type.startswith("tensor(") and onnx_type.endswith(")"):
            element = _ONNX_TO_NUMPY.get(onnx_type[7:-1], onnx_type[7:-1])
            return f"{name}:{element}[{','.join(map(str, value.shape()))}]"
        return f"{name}:{onnx_type}"
    return f"{name}:{type(value).__name__}"

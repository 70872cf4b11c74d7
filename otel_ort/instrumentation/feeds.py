"""Describe a run's inputs as ``name:dtype[dims]`` strings, without touching tensor contents."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

from otel_ort._util.text_limits import clip

MAX_DESCRIBED_INPUTS = 64
"""Inputs beyond this many are summarised as one ``+N more`` entry (bounded attribute size)."""

# ONNX element type names (as in ORT's ``tensor(float)``) that numpy spells differently;
# the others (int64, bool, float16, ...) are spelled alike.
_ONNX_TO_NUMPY = {"float": "float32", "double": "float64"}

_DESCRIPTIONS: dict[tuple[str, Any, Any], str] = {}
_MAX_DESCRIPTIONS = 4096
"""Descriptions of recently seen (name, dtype, shape): formatting a dtype takes ~3 us, and
reusing the string also spares the exporter's queue a new object per run."""


def describe_feeds(feeds: Mapping[str, Any]) -> tuple[str, ...]:
    """``{name: value}`` → ``("x:float32[64,256]", ...)``, at most 64 entries plus a count."""
    if len(feeds) > MAX_DESCRIBED_INPUTS:
        described = [
            describe_value(name, value)
            for name, value in islice(feeds.items(), MAX_DESCRIBED_INPUTS)
        ]
        described.append(f"+{len(feeds) - MAX_DESCRIBED_INPUTS} more")
        return tuple(described)
    described = []
    for name, value in feeds.items():  # describe_value's cache hit, inlined: once per run
        dtype = getattr(value, "dtype", None)
        found = None
        if dtype is not None:
            try:
                found = _DESCRIPTIONS.get((name, dtype, value.shape))
            except TypeError:  # unhashable dtype or shape: describe_value says so
                found = None
        described.append(found or describe_value(name, value))
    return tuple(described)


def describe_value(name: str, value: Any) -> str:
    """One input as ``name:dtype[dims]``; ``name:<type>`` for values that are not tensors;
    clipped to :data:`otel_ort._util.text_limits.MAX_TEXT` characters."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return clip(_spelled(name, value))
    try:
        key = (name, dtype, value.shape)
        described = _DESCRIPTIONS.get(key)
    except TypeError:  # unhashable dtype or shape
        return clip(_spelled(name, value))
    if described is None:
        described = clip(_spelled(name, value))
        if len(_DESCRIPTIONS) >= _MAX_DESCRIPTIONS:
            _DESCRIPTIONS.clear()
        _DESCRIPTIONS[key] = described
    return described


def _spelled(name: str, value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:  # numpy array or anything array-like
        return f"{name}:{dtype}[{','.join(map(str, value.shape))}]"
    data_type = getattr(value, "data_type", None)
    if callable(data_type):  # onnxruntime.OrtValue and its C++ counterpart
        onnx_type = str(data_type())
        if onnx_type.startswith("tensor(") and onnx_type.endswith(")"):
            element = onnx_type[7:-1]
            element = _ONNX_TO_NUMPY.get(element, element)
            return f"{name}:{element}[{','.join(map(str, value.shape()))}]"
        return f"{name}:{onnx_type}"
    return f"{name}:{type(value).__name__}"

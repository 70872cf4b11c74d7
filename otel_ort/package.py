"""The ONNX Runtime distributions this instrumentation works with (any one of them suffices).

All of them install the same ``onnxruntime`` Python module; they are mutually exclusive.
Keep in step with ``instruments-any`` in ``pyproject.toml``.
"""

_instruments: tuple[str, ...] = ()

_instruments_any: tuple[str, ...] = (
    "onnxruntime >= 1.20",
    "onnxruntime-gpu >= 1.20",
    "onnxruntime-directml >= 1.20",
    "onnxruntime-openvino >= 1.20",
    "onnxruntime-qnn >= 1.20",
    "onnxruntime-migraphx >= 1.20",
    "onnxruntime-rocm >= 1.20",
    "onnxruntime-cann >= 1.20",
)

"""A one-node ONNX model (``y = Relu(x)``, ``x`` a float vector of any length), encoded here
field by field so that no ``onnx`` package is needed.

otel-ort runs it on a private session: once per process, to prove by behaviour that it found
the run-level profiling fields of ORT's ``RunOptions`` (``run_options_layout``); and, on a
thread whose thread-pool profiler log grows, to have ORT clear that log (``pool_log``). With
a long enough ``x``, its one node runs a parallel section on the session's intra-op pool.
"""

from __future__ import annotations

INPUT = "x"
OUTPUT = "y"
OPSET = 13
IR_VERSION = 8


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (wire type 2): a string or an embedded message."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _int(number: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return _varint(number << 3) + _varint(value)


def _float_vector(name: str) -> bytes:
    """ValueInfoProto: ``name``, a float tensor of shape ``[n]``."""
    dimension = _bytes(1, _bytes(2, "n"))  # TensorShapeProto.dim { dim_param: "n" }
    tensor = _int(1, 1) + _bytes(2, dimension)  # elem_type FLOAT, shape
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor))  # name, type { tensor_type }


def relu_model() -> bytes:
    """The model's ``ModelProto`` bytes."""
    node = _bytes(1, INPUT) + _bytes(2, OUTPUT) + _bytes(3, "relu") + _bytes(4, "Relu")
    graph = (
        _bytes(1, node)
        + _bytes(2, "otel-ort-probe")
        + _bytes(11, _float_vector(INPUT))
        + _bytes(12, _float_vector(OUTPUT))
    )
    opset = _bytes(1, "") + _int(2, OPSET)
    return _int(1, IR_VERSION) + _bytes(2, "otel-ort") + _bytes(7, graph) + _bytes(8, opset)

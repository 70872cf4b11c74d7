"""An ONNX model's protobuf encoding read field by field, without the ``onnx`` package.

Only what otel-ort needs: the length-delimited fields of a message (nested messages, strings)
located by their field numbers in ``onnx.proto``; the values themselves are never parsed.
"""

from __future__ import annotations

from collections.abc import Iterator

ORT_FORMAT_ID = b"ORTM"
"""An ORT-format model (FlatBuffers, not protobuf) carries this file identifier at bytes 4..8."""
_LENGTH_DELIMITED = 2


def fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in ``data[start:end]``;
    other wire types are skipped. A malformed encoding raises ``IndexError``."""
    position = start
    while position < end:
        key, position = _varint(data, position)
        wire_type = key & 7
        if wire_type == _LENGTH_DELIMITED:
            length, position = _varint(data, position)
            if position + length > end:
                raise IndexError("field runs past its message")
            yield key >> 3, position, position + length
            position += length
        elif wire_type == 0:
            _, position = _varint(data, position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 5:
            position += 4
        else:
            raise IndexError(f"wire type {wire_type} (groups) is not read here")
    if position != end:
        raise IndexError("field runs past its message")


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise IndexError("varint longer than 10 bytes")

"""numpy arrays to ``OrtValue*`` and ``OrtValue*`` to what ``InferenceSession.run`` returns.

Outputs match ORT's Python API: numpy arrays copied out of ORT memory (0-d for scalars),
string tensors as object arrays of ``str``, sequences as lists, maps as dicts of Python
scalars, an optional without a value as ``None``, and FLOAT8E4M3FN as raw ``uint8`` (ORT's
Python API does the same). Element types it refuses (bfloat16, other float8s, int4, ...) raise
``UnsupportedOutput``; inputs it cannot convert, ``UnsupportedValue``.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Any

import numpy as np

from otel_ort.capi.library import CApi, UnsupportedOutput, UnsupportedValue, ffi

STRING = 8
# ONNXTensorElementDataType names, by value, as ORT's Python API spells them in type strings.
ELEMENT_NAMES = (
    "undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
    "float16", "double", "uint32", "uint64", "complex64", "complex128", "bfloat16",
    "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4",
    "float4e2m1", "uint2", "int2", "float8e8m0",
)  # fmt: skip

# numpy dtype (kind, itemsize) -> element type. Byte order is ignored, as ORT's Python API does.
_ELEMENT_OF_KIND = {
    ("f", 4): 1, ("u", 1): 2, ("i", 1): 3, ("u", 2): 4, ("i", 2): 5, ("i", 4): 6, ("i", 8): 7,
    ("b", 1): 9, ("f", 2): 10, ("f", 8): 11, ("u", 4): 12, ("u", 8): 13,
}  # fmt: skip
_DTYPE_OF_ELEMENT = {
    element: np.dtype(f"{k}{size}") for (k, size), element in _ELEMENT_OF_KIND.items()
}
_DTYPE_OF_ELEMENT[17] = np.dtype(np.uint8)  # FLOAT8E4M3FN: ORT's Python API returns raw bytes

# ONNXType values
TENSOR, SEQUENCE, MAP, SPARSE_TENSOR, OPTIONAL = 1, 2, 3, 5, 6
ONNX_TYPE_NAMES = ("unknown", "tensor", "seq", "map", "opaque", "sparse_tensor", "optional")
# resolved once: ffi.new with a ctype skips parsing the type string on the run path
_INT = ffi.typeof("int*")
_SIZE = ffi.typeof("size_t*")
_SHAPE = ffi.typeof("int64_t[]")
_SHAPE_REFERENCE = ffi.typeof("int64_t**")
_DATA = ffi.typeof("void**")
_VALUE = ffi.typeof("OrtValue**")
_SHAPE_CACHE_LIMIT = 64


def element_name(element: int) -> str:
    """ORT's Python spelling of an ``ONNXTensorElementDataType``."""
    return ELEMENT_NAMES[element] if 0 <= element < len(ELEMENT_NAMES) else f"type{element}"


class ValueCodec:
    """Converts between Python values and ``OrtValue*`` with one library's functions."""

    def __init__(self, api: CApi, *, check_device: bool = False) -> None:
        """``check_device``: verify that output tensors are in CPU memory before reading them."""
        self._api = api
        self._check_device = check_device
        fn = api.function
        self._create_with_data = fn("CreateTensorWithDataAsOrtValue")
        self._create_tensor = fn("CreateTensorAsOrtValue")
        self._fill_strings = fn("FillStringTensor")
        self._mutable_data = fn("GetTensorMutableData")
        self._release_value = fn("ReleaseValue")
        self._value_type = fn("GetValueType")
        self._has_value = fn("HasValue")
        self._value_count = fn("GetValueCount")
        self._get_value = fn("GetValue")
        self._strings_length = fn("GetStringTensorDataLength")
        self._strings_content = fn("GetStringTensorContent")
        self._memory_info = api.cpu_memory_info
        self._allocator = api.allocator
        self._element_of_dtype: dict[np.dtype[Any], int] = {}
        self._shapes: dict[tuple[int, ...], Any] = {}
        """``int64_t[]`` of input shapes seen (ORT copies a shape: one array serves every run)."""
        self._scratch = threading.local()
        """Per thread: the out-parameters of a tensor's type, shape and data queries."""
        if api.has("GetTensorElementTypeAndShapeDataReference"):
            self._type_and_shape = self._type_and_shape_by_reference
            self._shape_reference = fn("GetTensorElementTypeAndShapeDataReference")
        else:
            self._type_and_shape = self._type_and_shape_by_info

    def to_ort(self, name: str, array: Any, out: Any, keep: list[Any]) -> None:
        """Store a new ``OrtValue*`` for input ``name`` in ``out[0]``.

        ``keep`` must outlive the value: it holds the memory the value points to.
        """
        if not isinstance(array, np.ndarray):
            raise UnsupportedValue(
                f"input {name!r}: {type(array).__name__} is not supported, only numpy arrays"
            )
        element = self._element_of_dtype.get(array.dtype)
        if element is None:
            element = self._element_of(name, array.dtype)
        shape = self._shapes.get(array.shape)
        if shape is None:
            shape = ffi.new(_SHAPE, array.shape or (0,))
            if len(self._shapes) < _SHAPE_CACHE_LIMIT:
                self._shapes[array.shape] = shape
        keep.append(shape)
        if element == STRING:
            self._check(
                self._create_tensor(self._allocator, shape, array.ndim, STRING, out),
                "CreateTensorAsOrtValue",
            )
            self._fill(name, out[0], array)  # the caller releases out[0]
            return
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        data = ffi.from_buffer(array)
        keep.append(data)
        self._check(
            self._create_with_data(
                self._memory_info, data, array.nbytes, shape, array.ndim, element, out
            ),
            "CreateTensorWithDataAsOrtValue",
        )

    def from_ort(self, name: str, value: Any) -> Any:
        """The Python value of an output ``OrtValue*`` (which stays owned by the caller)."""
        kind = ffi.new(_INT)
        self._check(self._value_type(value, kind), "GetValueType")
        if kind[0] == TENSOR:
            return self.tensor(name, value)
        if kind[0] == SEQUENCE:
            return [
                self._element(name, value, index, self.from_ort)
                for index in range(self._count(value))
            ]
        if kind[0] == MAP:
            keys = self._element(name, value, 0, self.tensor)
            values = self._element(name, value, 1, self.tensor)
            return dict(zip(keys.tolist(), values.tolist(), strict=True))
        kind_name = ONNX_TYPE_NAMES[kind[0]] if kind[0] < len(ONNX_TYPE_NAMES) else kind[0]
        raise UnsupportedOutput(f"output {name!r}: {kind_name} values are not supported")

    def optional_from_ort(self, name: str, value: Any) -> Any:
        """Like ``from_ort``, but ``None`` for an optional output without a value."""
        has = ffi.new(_INT)
        self._check(self._has_value(value, has), "HasValue")
        return self.from_ort(name, value) if has[0] else None

    def tensor(self, name: str, value: Any) -> Any:
        """A numpy copy of a CPU tensor ``OrtValue*``."""
        element, shape = self._type_and_shape(value)
        if element == STRING:
            return self._strings(name, value, shape)
        dtype = _DTYPE_OF_ELEMENT.get(element)
        if dtype is None:
            raise UnsupportedOutput(
                f"output {name!r}: tensor({element_name(element)}) has no numpy type in "
                "ONNX Runtime's Python API either"
            )
        if self._check_device:
            self._require_cpu(name, value)
        result = np.empty(shape, dtype)
        if result.nbytes:
            data = self._out()[3]
            self._check(self._mutable_data(value, data), "GetTensorMutableData")
            ffi.memmove(result, data[0], result.nbytes)
        return result

    def _out(self) -> tuple[Any, Any, Any, Any]:
        """This thread's (element type, shape, rank, data) out-parameters, made once. Only
        ``tensor`` uses them, and it reads each before anything else can write it."""
        try:
            return self._scratch.out  # type: ignore[no-any-return]
        except AttributeError:
            out = self._scratch.out = (
                ffi.new(_INT),
                ffi.new(_SHAPE_REFERENCE),
                ffi.new(_SIZE),
                ffi.new(_DATA),
            )
            return out

    def _require_cpu(self, name: str, value: Any) -> None:
        info = ffi.new("OrtMemoryInfo**")
        self._api.call("GetTensorMemoryInfo", value, info)
        device = ffi.new("int*")
        self._api.function("MemoryInfoGetDeviceType")(info[0], device)
        if device[0] != 0:  # OrtMemoryInfoDeviceType_CPU
            raise UnsupportedOutput(f"output {name!r}: tensor is in device memory ({device[0]})")

    def _element_of(self, name: str, dtype: np.dtype[Any]) -> int:
        if dtype.kind == "U" and not dtype.isnative:
            raise UnsupportedValue(
                f"input {name!r}: str arrays of the other byte order ({dtype}) are not taken, "
                "as ONNX Runtime's Python API reads their characters in this machine's order"
            )
        if dtype.kind in "OU":  # not cached: each string length is a dtype of its own
            return STRING
        if dtype.kind == "S":
            raise UnsupportedValue(
                f"input {name!r}: bytes arrays ({dtype}) are not taken, as ONNX Runtime's "
                "Python API reads an item that fills its width on into the next one: pass str "
                "or object arrays"
            )
        element = _ELEMENT_OF_KIND.get((dtype.kind, dtype.itemsize))
        if element is None:
            raise UnsupportedValue(
                f"input {name!r}: numpy dtype {dtype} has no ONNX tensor type in ONNX "
                "Runtime's Python API"
            )
        self._element_of_dtype[dtype] = element
        return element

    def _fill(self, name: str, value: Any, array: Any) -> None:
        """Fill a string tensor as ORT's Python API does.

        Object arrays: ``str(item)`` of each item, embedded NULs kept. ``str_`` arrays: each item
        up to its first NUL (ORT's Python API reads them as C strings).
        """
        items = array.ravel().tolist()
        if array.dtype.kind == "O":
            items = [item if type(item) is str else str(item) for item in items]
        try:
            encoded = [item.encode() for item in items]
        except UnicodeEncodeError as exc:
            raise UnsupportedValue(f"input {name!r}: string not encodable as UTF-8: {exc}") from exc
        if not encoded:
            return
        buffer = ffi.from_buffer(b"\0".join(encoded) + b"\0")
        lengths = np.fromiter(map(len, encoded), np.uint64, len(encoded)) + 1
        addresses = np.empty(len(encoded), np.uint64)
        addresses[0] = 0
        np.cumsum(lengths[:-1], out=addresses[1:])
        addresses += int(ffi.cast("uintptr_t", buffer))
        pointers = ffi.cast("const char* const*", ffi.from_buffer(addresses))
        self._check(self._fill_strings(value, pointers, len(encoded)), "FillStringTensor")
        if array.dtype.kind == "O":
            for index, item in enumerate(encoded):
                if b"\0" in item:
                    self._set_string(value, index, item)

    def _set_string(self, value: Any, index: int, item: bytes) -> None:
        """Store ``item`` with its embedded NULs (``FillStringTensor`` stops at the first)."""
        target = ffi.new("char**")
        self._api.call("GetResizedStringTensorElementBuffer", value, index, len(item), target)
        ffi.memmove(target[0], item, len(item))

    def _strings(self, name: str, value: Any, shape: list[int]) -> Any:
        count = math.prod(shape)
        result = np.empty(count, object)
        if count:
            total = ffi.new("size_t*")
            self._check(self._strings_length(value, total), "GetStringTensorDataLength")
            content = ffi.new("char[]", total[0] or 1)
            offsets = ffi.new("size_t[]", count)
            self._check(
                self._strings_content(value, content, total[0], offsets, count),
                "GetStringTensorContent",
            )
            data = ffi.buffer(content, total[0])[:]
            bounds = [*ffi.unpack(offsets, count), total[0]]
            try:
                result[:] = [data[a:b].decode() for a, b in itertools.pairwise(bounds)]
            except UnicodeDecodeError as exc:
                raise UnsupportedOutput(f"output {name!r}: string is not UTF-8: {exc}") from exc
        return result.reshape(shape)

    def _count(self, value: Any) -> int:
        count = ffi.new(_SIZE)
        self._check(self._value_count(value, count), "GetValueCount")
        return int(count[0])

    def _element(self, name: str, value: Any, index: int, convert: Any) -> Any:
        out = ffi.new(_VALUE)
        self._check(self._get_value(value, index, self._allocator, out), "GetValue")
        try:
            return convert(name, out[0])
        finally:
            self._release_value(out[0])

    def _type_and_shape_by_reference(self, value: Any) -> tuple[int, list[int]]:
        element, shape, rank, _ = self._out()
        self._check(
            self._shape_reference(value, element, shape, rank),
            "GetTensorElementTypeAndShapeDataReference",
        )
        return element[0], ffi.unpack(shape[0], rank[0]) if rank[0] else []

    def _type_and_shape_by_info(self, value: Any) -> tuple[int, list[int]]:
        info = ffi.new("OrtTensorTypeAndShapeInfo**")
        self._api.call("GetTensorTypeAndShape", value, info)
        try:
            element = ffi.new("int*")
            rank = ffi.new("size_t*")
            self._api.call("GetTensorElementType", info[0], element)
            self._api.call("GetDimensionsCount", info[0], rank)
            shape = ffi.new("int64_t[]", rank[0] or 1)
            self._api.call("GetDimensions", info[0], shape, rank[0])
            return element[0], ffi.unpack(shape, rank[0])
        finally:
            self._api.function("ReleaseTensorTypeAndShapeInfo")(info[0])

    def _check(self, status: Any, function: str) -> None:
        if status:
            raise self._api.error(status, function)

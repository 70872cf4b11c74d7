"""Inputs for a model, built from its signature for ``otel-ort profile``.

Each input is the user's ``.npy`` array (``--input``), checked against the input's type and
dimensions, or seeded random data of the dimensions given (``--shape``). A symbolic dimension
takes the size that ``--shape`` or ``--input`` gave it on any input (inputs sharing a name
share a size, as ONNX means; placeholders such as ``?`` or ``-1`` name nothing shared), else 1,
with a note. An input the model gives no shape (unknown rank, which ORT's Python API reports
like a scalar's) takes any dimensions; left alone it is a scalar, with a note.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import numpy as np

from otel_ort.cli.free_memory import available_bytes, size_text
from otel_ort.cli.onnx_wire import ORT_FORMAT_ID, fields

SEED = 0
T = TypeVar("T")
# ONNX element type (as in ORT's "tensor(float)") -> numpy dtype of the inputs built for it
_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(dtype)
    for name, dtype in (
        ("float", np.float32), ("double", np.float64), ("float16", np.float16),
        ("int8", np.int8), ("int16", np.int16), ("int32", np.int32), ("int64", np.int64),
        ("uint8", np.uint8), ("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64),
        ("bool", np.bool_), ("string", np.object_),
    )
}  # fmt: skip
_WORDS = np.array(["the", "model", "runs", "fast", "on", "random", "words", "today"], object)
_INT_HIGH = 10
"""Random integers are drawn from 0..9, valid indices for Gather and embeddings."""
_NPY_MAGIC = b"\x93NUMPY"
# field numbers in onnx.proto
_MODEL_GRAPH, _GRAPH_INPUT = 7, 11
_VALUE_INFO_NAME, _VALUE_INFO_TYPE = 1, 2
_TYPE_TENSOR, _TENSOR_SHAPE = 1, 2


class InputError(Exception):
    """An input cannot be built as asked; the message names it and the fix."""


@dataclass(frozen=True)
class InputSpec:
    """One model input as ORT's Python API describes it."""

    name: str
    type: str
    """``tensor(float)``, ``seq(tensor(int64))``, ..."""
    dims: tuple[int | str | None, ...] | None
    """Fixed sizes, symbolic names, or ``None`` when unknown; ``None`` for no shape at all."""
    initializer: bool = False
    """An initializer that is also a graph input: fed only when the user gives it."""

    @property
    def element(self) -> str:
        return self.type.removeprefix("tensor(").removesuffix(")")

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return _DTYPES.get(self.element) if self.type.startswith("tensor(") else None

    def describe(self) -> str:
        dtype = self.dtype
        element = self.element if dtype is None or dtype.kind == "O" else str(dtype)
        return f"{element} of any shape" if self.dims is None else element + dims_text(self.dims)


def parse_pairs(texts: Sequence[str], option: str, parse: Callable[[str, str], T]) -> dict[str, T]:
    """``NAME=VALUE`` texts of ``option`` → {name: ``parse(name, value)``}; each name once."""
    pairs: dict[str, str] = {}
    for text in texts:
        name, equals, value = text.partition("=")
        if not (equals and name and value):
            example = "x=1,3,224,224" if option == "--shape" else "x=batch.npy"
            raise InputError(f"{option} {text!r}: expected NAME=VALUE, e.g. {option} {example}")
        if name in pairs:
            raise InputError(
                f"{option} {name}= is given twice ({pairs[name]} and {value}): give it once"
            )
        pairs[name] = value
    return {name: parse(name, value) for name, value in pairs.items()}


def parse_dims(name: str, text: str) -> tuple[int, ...]:
    """``--shape NAME=D0,D1,...``'s dimensions."""
    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError:
        dims = (-1,)
    if any(dim < 0 for dim in dims):
        raise InputError(
            f"--shape {name}={text}: dimensions must be whole numbers separated by commas, "
            f"e.g. --shape {name}=1,3,224,224"
        )
    return dims


def load_array(name: str, path: str) -> Any:
    """``--input NAME=FILE.npy``'s array."""
    try:
        with open(path, "rb") as file:
            if file.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                raise InputError(
                    f"--input {name}={path}: not a .npy file; save the array with numpy.save"
                )
            size, free = _npy_size(file), available_bytes()
            if free is not None and size > free:
                raise InputError(
                    f"--input {name}={path}: its array is larger than this machine's free "
                    f"memory ({size_text(size)}; {size_text(free)} free): save a smaller one"
                )
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"--input {name}={path}: cannot read a .npy array from it ({exc})"
        ) from None
    except MemoryError:
        raise InputError(
            f"--input {name}={path}: its array is larger than this machine's free memory: "
            "save a smaller one"
        ) from None


def read_inputs(model: str) -> list[InputSpec]:
    """The model's inputs with their types and dimensions, read through ORT's Python API (the
    C API binding does not expose dimensions) and, for the rank, the model's encoding."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT's own exception types
        raise InputError(f"{model}: ONNX Runtime cannot open this model: {exc}") from None
    unshaped = unshaped_inputs(model)
    return [
        InputSpec(arg.name, arg.type, None if arg.name in unshaped else tuple(arg.shape))
        for arg in session.get_inputs()
    ] + [
        InputSpec(arg.name, arg.type, tuple(arg.shape), initializer=True)
        for arg in session.get_overridable_initializers()
    ]


def unshaped_inputs(model: str) -> set[str]:
    """The names of the graph inputs of ``model`` (a path) whose tensor type has no shape;
    none for an ORT-format or unreadable model. The file is mapped, not read: only the
    headers of its fields are touched, not the weights."""
    with open(model, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as raw:
        if raw[4:8] == ORT_FORMAT_ID:
            return set()
        found: set[str] = set()
        with memoryview(raw) as data:
            try:
                _unshaped(data, found)
            except IndexError:  # ORT read it, so this is not expected; no traceback kept
                found.clear()
        return found


def _unshaped(data: memoryview, found: set[str]) -> None:
    for field, graph_start, graph_end in fields(data, 0, len(data)):
        if field != _MODEL_GRAPH:
            continue
        for graph_field, start, end in fields(data, graph_start, graph_end):
            if graph_field != _GRAPH_INPUT:
                continue
            name, tensor, shaped = "", False, False
            for info_field, value_start, value_end in fields(data, start, end):
                if info_field == _VALUE_INFO_NAME:
                    name = bytes(data[value_start:value_end]).decode(errors="replace")
                elif info_field == _VALUE_INFO_TYPE:
                    for type_field, t_start, t_end in fields(data, value_start, value_end):
                        if type_field == _TYPE_TENSOR:
                            tensor = True
                            shaped = any(
                                f == _TENSOR_SHAPE for f, *_ in fields(data, t_start, t_end)
                            )
            if tensor and not shaped:
                found.add(name)


def build_feeds(
    specs: Sequence[InputSpec],
    shapes: Mapping[str, tuple[int, ...]],
    arrays: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The feeds for ``specs`` and a line describing each input (and notes)."""
    _check_names(specs, shapes, arrays)
    both = sorted(set(shapes) & set(arrays))
    if both:
        raise InputError(
            f"input {both[0]!r} is given by --input and --shape: an --input array has its own "
            "shape; drop one of the two"
        )
    for spec in specs:
        if spec.name in arrays:
            _check(spec, arrays[spec.name])
        elif spec.name in shapes:
            _check_shape(spec, shapes[spec.name])
    sizes = _named_sizes(specs, shapes, arrays)
    rng = np.random.default_rng(SEED)
    feeds: dict[str, Any] = {}
    lines: list[str] = []
    for spec in specs:
        if spec.name in arrays:
            feeds[spec.name] = arrays[spec.name]
            lines.append(f"input {spec.name}: {described(feeds[spec.name])} from --input")
            continue
        if spec.initializer:
            continue  # the model's own value
        dims, note = _resolved_dims(spec, shapes.get(spec.name), sizes)
        dtype = _dtype(spec)
        drawing = math.prod(dims) * _drawn_bytes(dtype)
        free = available_bytes()
        try:
            if free is not None and drawing > free:
                raise MemoryError  # not drawn: where Linux overcommits, filling it would thrash
            feeds[spec.name] = _random(rng, dtype, dims)
        except (MemoryError, ValueError):  # numpy: "array is too big", dimension limits
            has = f" has {size_text(free)} free" if free is not None else " can give"
            raise InputError(
                f"input {spec.name}: {dtype}[{','.join(map(str, dims))}] needs "
                f"{size_text(drawing)} to draw, more than this machine{has}: choose smaller "
                f"dimensions with --shape {spec.name}=..."
            ) from None
        lines.append(f"input {spec.name}: {described(feeds[spec.name])} random (seed {SEED})")
        if note:
            lines.append(note)
    return feeds, lines


def _check_names(
    specs: Sequence[InputSpec], shapes: Mapping[str, object], arrays: Mapping[str, object]
) -> None:
    """Every name given to --shape or --input is one the model takes there."""
    inputs = [spec.name for spec in specs if not spec.initializer]
    initializers = [spec.name for spec in specs if spec.initializer]  # their values: --input
    for option, names, known in (
        ("--shape", shapes, inputs),
        ("--input", arrays, inputs + initializers),
    ):
        for name in names:
            if name in known:
                continue
            if name in initializers:  # so --shape
                raise InputError(
                    f"--shape names {name!r}, an initializer: the model has its value; "
                    f"give another with --input {name}=FILE.npy"
                )
            also = f"; initializers it can take: {', '.join(initializers)}" * bool(initializers)
            raise InputError(
                f"{option} names input {name!r}, which the model does not have; "
                f"its inputs: {', '.join(sorted(inputs)) or 'none'}{also}"
            )


def dims_text(dims: Sequence[object]) -> str:
    return f"[{','.join('?' if dim is None else str(dim) for dim in dims)}]"


def described(array: Any) -> str:
    dtype = "string" if array.dtype.kind in "OU" else str(array.dtype)
    return f"{dtype}{dims_text(array.shape)}"


def _dtype(spec: InputSpec) -> np.dtype[Any]:
    dtype = spec.dtype
    if dtype is None:
        raise InputError(
            f"input {spec.name!r} is {spec.type}: otel-ort profile can only build tensors of "
            f"{', '.join(_DTYPES)}"
        )
    return dtype


def _check(spec: InputSpec, array: Any) -> None:
    """A ``InputError`` saying what the input expects unless ``array`` fits ``spec``."""
    dtype = _dtype(spec)
    if dtype.kind == "O" and array.dtype.kind not in "OU":
        fix = "save an array of str"
    elif dtype.kind != "O" and array.dtype != dtype:
        fix = f"convert it with array.astype(np.{dtype.name})"
    elif spec.dims is not None and (
        array.ndim != len(spec.dims)
        or any(
            isinstance(dim, int) and dim != size
            for dim, size in zip(spec.dims, array.shape, strict=True)
        )
    ):
        fix = "save an array of that shape"
    else:
        return
    raise InputError(
        f"--input {spec.name}: the array is {described(array)}, but input {spec.name!r} "
        f"expects {spec.describe()}: {fix}"
    )


def _check_shape(spec: InputSpec, given: tuple[int, ...]) -> None:
    """A ``InputError`` unless ``--shape`` dimensions ``given`` fit ``spec``."""
    if spec.dims is None:
        return
    if len(given) != len(spec.dims):
        raise InputError(
            f"--shape {spec.name}={','.join(map(str, given))}: gives {len(given)} "
            f"dimension(s), but input {spec.name!r} has {len(spec.dims)}: {spec.describe()}"
        )
    for dim, size in zip(spec.dims, given, strict=True):
        if isinstance(dim, int) and dim != size:
            raise InputError(
                f"--shape {spec.name}={','.join(map(str, given))}: input {spec.name!r} is "
                f"{spec.describe()}; its fixed dimensions cannot change"
            )


def _named_sizes(
    specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]], arrays: Mapping[str, Any]
) -> dict[str, int]:
    """The size of each symbolic dimension that ``--shape`` or ``--input`` gave on an input;
    an ``InputError`` where two of them disagree."""
    sizes: dict[str, tuple[int, str]] = {}
    for spec in specs:
        if spec.name in arrays:
            given, source = arrays[spec.name].shape, f"--input {spec.name}"
        elif spec.name in shapes:
            given, source = shapes[spec.name], f"--shape {spec.name}"
        else:
            continue
        for dim, size in zip(spec.dims or (), given, strict=False):
            if not _shared_name(dim):
                continue
            first, first_source = sizes.setdefault(dim, (size, source))
            if size != first:
                raise InputError(
                    f"{source} makes dimension {dim!r} {size}, but {first_source} made it "
                    f"{first}: inputs that share a dimension name share its size"
                )
    return {dim: size for dim, (size, _) in sizes.items()}


def _shared_name(dim: object) -> TypeGuard[str]:
    """Whether ``dim`` is a symbolic name that dimensions bearing it share. Exporters name
    every unknown dimension alike with a placeholder (``?``, empty, numeric-looking like
    ``-1``): those are each their own unknown, not one shared size."""
    if not isinstance(dim, str):
        return False
    text = dim.strip()
    return text not in ("", "?") and not text.lstrip("+-").replace(".", "", 1).isdigit()


def _resolved_dims(
    spec: InputSpec, given: tuple[int, ...] | None, sizes: Mapping[str, int]
) -> tuple[tuple[int, ...], str]:
    """The dimensions of a random input (already checked against ``spec``), and a note when
    some were guessed."""
    if given is not None:
        return given, ""
    if spec.dims is None:
        return (), (
            f"note: input {spec.name}: the model gives it no shape; made a scalar; choose "
            f"with --shape {spec.name}=D0,D1,..."
        )
    unknown = [dim or "?" for dim in spec.dims if not isinstance(dim, int) and dim not in sizes]
    dims = tuple(dim if isinstance(dim, int) else sizes.get(dim or "", 1) for dim in spec.dims)
    if not unknown:
        return dims, ""
    example = ",".join(  # sizes to paste and edit: 8 for each unknown one
        "8" if not isinstance(dim, int) and dim not in sizes else str(size)
        for dim, size in zip(spec.dims, dims, strict=True)
    )
    return dims, (
        f"note: input {spec.name}: unknown dimension{'s' * (len(unknown) > 1)} "
        f"{', '.join(unknown)} set to 1; choose with --shape, e.g. --shape {spec.name}={example}"
    )


def _npy_size(file: Any) -> int:
    """The bytes of the array in a .npy ``file`` (read from its header), 0 if not known."""
    file.seek(0)
    version = np.lib.format.read_magic(file)
    read_header = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }.get(version)
    if read_header is None:
        return 0
    shape, _, dtype = read_header(file)
    return math.prod(shape) * dtype.itemsize


def _random(rng: np.random.Generator, dtype: np.dtype[Any], dims: tuple[int, ...]) -> Any:
    if dtype.kind == "f":  # drawn in float32 (float64 for doubles): no float64 copy
        wide = np.float64 if dtype == np.float64 else np.float32
        return rng.standard_normal(dims, dtype=wide).astype(dtype, copy=False)
    if dtype.kind in "iu":
        return rng.integers(0, _INT_HIGH, dims).astype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(dims) < 0.5)  # a 0-d draw is a Python float
    return rng.choice(_WORDS, dims)


def _drawn_bytes(dtype: np.dtype[Any]) -> int:
    """Bytes per element ``_random`` holds at its peak: the draw, and the result if a copy."""
    if dtype.kind == "f":
        drawn = 8 if dtype == np.float64 else 4
        return drawn + (0 if dtype.itemsize == drawn else dtype.itemsize)
    if dtype.kind in "iu":
        return 8 + dtype.itemsize  # int64 draws, then a copy in the dtype
    if dtype.kind == "b":
        return 8 + 1  # float64 draws, then the comparison
    return 8 + 8  # int64 indices into the words, then object pointers

"""Load ``libonnxruntime`` through cffi in ABI mode and expose its ``OrtApi`` function table.

Nothing is compiled: the library is ``dlopen``-ed and each needed ``OrtApi`` slot is cast to its
C function-pointer type by index. The table is append-only, so a slot's index never changes; a
slot is read only when the API version that ``GetApi`` accepted includes it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import cffi  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev env

from otel_ort.forking import renew_locks_in_child

ffi = cffi.FFI()
ffi.cdef(
    """
    typedef struct OrtEnv OrtEnv;
    typedef struct OrtStatus OrtStatus;
    typedef struct OrtMemoryInfo OrtMemoryInfo;
    typedef struct OrtSession OrtSession;
    typedef struct OrtValue OrtValue;
    typedef struct OrtRunOptions OrtRunOptions;
    typedef struct OrtTypeInfo OrtTypeInfo;
    typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
    typedef struct OrtSessionOptions OrtSessionOptions;
    typedef struct OrtMapTypeInfo OrtMapTypeInfo;
    typedef struct OrtSequenceTypeInfo OrtSequenceTypeInfo;
    typedef struct OrtOptionalTypeInfo OrtOptionalTypeInfo;
    typedef struct OrtAllocator OrtAllocator;
    typedef struct OrtCUDAProviderOptionsV2 OrtCUDAProviderOptionsV2;
    typedef struct OrtApiBase {
        void** (*GetApi)(uint32_t version);
        const char* (*GetVersionString)(void);
    } OrtApiBase;
    const OrtApiBase* OrtGetApiBase(void);
    """
)

ORT_API_VERSION_KNOWN = 31
"""Highest ``OrtApi`` version this binding asks for (verified against onnxruntime 1.31.1)."""

# Last slot index of each API version, from the static_asserts in ORT's onnxruntime_c_api.cc
# (19 and 21 added nothing). 25 is cut at the profiling pair 415/416, the last slots used here.
_VERSION_ENDS = (
    (1, 101), (2, 118), (3, 124), (4, 126), (5, 149), (6, 157), (7, 161), (8, 169), (9, 191),
    (10, 203), (11, 209), (12, 218), (13, 224), (14, 238), (15, 254), (16, 265), (17, 275),
    (18, 279), (20, 284), (22, 317), (23, 389), (24, 414), (25, 416),
)  # fmt: skip

_S = "OrtStatus* (*)"
# name: (OrtApi slot, C type). Enums are passed as int (4 bytes on the supported ABIs).
_FUNCTIONS: dict[str, tuple[int, str]] = {
    "GetErrorCode": (1, "int (*)(const OrtStatus*)"),
    "GetErrorMessage": (2, "const char* (*)(const OrtStatus*)"),
    "CreateEnv": (3, _S + "(int, const char*, OrtEnv**)"),
    "CreateSession": (
        7,
        _S + "(const OrtEnv*, const char*, const OrtSessionOptions*, OrtSession**)",
    ),
    "CreateSessionFromArray": (
        8,
        _S + "(const OrtEnv*, const void*, size_t, const OrtSessionOptions*, OrtSession**)",
    ),
    "Run": (
        9,
        _S + "(OrtSession*, const OrtRunOptions*, const char* const*, const OrtValue* const*,"
        " size_t, const char* const*, size_t, OrtValue**)",
    ),
    "CreateSessionOptions": (10, _S + "(OrtSessionOptions**)"),
    "SetSessionExecutionMode": (13, _S + "(OrtSessionOptions*, int)"),
    "EnableMemPattern": (16, _S + "(OrtSessionOptions*)"),
    "DisableMemPattern": (17, _S + "(OrtSessionOptions*)"),
    "EnableCpuMemArena": (18, _S + "(OrtSessionOptions*)"),
    "DisableCpuMemArena": (19, _S + "(OrtSessionOptions*)"),
    "SetSessionLogSeverityLevel": (22, _S + "(OrtSessionOptions*, int)"),
    "SetSessionGraphOptimizationLevel": (23, _S + "(OrtSessionOptions*, int)"),
    "SetIntraOpNumThreads": (24, _S + "(OrtSessionOptions*, int)"),
    "SetInterOpNumThreads": (25, _S + "(OrtSessionOptions*, int)"),
    "SessionGetInputCount": (30, _S + "(const OrtSession*, size_t*)"),
    "SessionGetOutputCount": (31, _S + "(const OrtSession*, size_t*)"),
    "SessionGetInputTypeInfo": (33, _S + "(const OrtSession*, size_t, OrtTypeInfo**)"),
    "SessionGetOutputTypeInfo": (34, _S + "(const OrtSession*, size_t, OrtTypeInfo**)"),
    "SessionGetInputName": (36, _S + "(const OrtSession*, size_t, OrtAllocator*, char**)"),
    "SessionGetOutputName": (37, _S + "(const OrtSession*, size_t, OrtAllocator*, char**)"),
    "CreateRunOptions": (39, _S + "(OrtRunOptions**)"),
    "RunOptionsSetRunLogSeverityLevel": (41, _S + "(OrtRunOptions*, int)"),
    "RunOptionsSetRunTag": (42, _S + "(OrtRunOptions*, const char*)"),
    "RunOptionsSetTerminate": (46, _S + "(OrtRunOptions*)"),
    "CreateTensorAsOrtValue": (
        48,
        _S + "(OrtAllocator*, const int64_t*, size_t, int, OrtValue**)",
    ),
    "CreateTensorWithDataAsOrtValue": (
        49,
        _S + "(const OrtMemoryInfo*, void*, size_t, const int64_t*, size_t, int, OrtValue**)",
    ),
    "GetTensorMutableData": (51, _S + "(OrtValue*, void**)"),
    "FillStringTensor": (52, _S + "(OrtValue*, const char* const*, size_t)"),
    "GetStringTensorDataLength": (53, _S + "(const OrtValue*, size_t*)"),
    "GetStringTensorContent": (54, _S + "(const OrtValue*, void*, size_t, size_t*, size_t)"),
    "CastTypeInfoToTensorInfo": (
        55,
        _S + "(const OrtTypeInfo*, const OrtTensorTypeAndShapeInfo**)",
    ),
    "GetOnnxTypeFromTypeInfo": (56, _S + "(const OrtTypeInfo*, int*)"),
    "GetTensorElementType": (60, _S + "(const OrtTensorTypeAndShapeInfo*, int*)"),
    "GetDimensionsCount": (61, _S + "(const OrtTensorTypeAndShapeInfo*, size_t*)"),
    "GetDimensions": (62, _S + "(const OrtTensorTypeAndShapeInfo*, int64_t*, size_t)"),
    "GetTensorTypeAndShape": (65, _S + "(const OrtValue*, OrtTensorTypeAndShapeInfo**)"),
    "GetValueType": (67, _S + "(const OrtValue*, int*)"),
    "CreateCpuMemoryInfo": (69, _S + "(int, int, OrtMemoryInfo**)"),
    "AllocatorFree": (76, _S + "(OrtAllocator*, void*)"),
    "GetAllocatorWithDefaultOptions": (78, _S + "(OrtAllocator**)"),
    "AddFreeDimensionOverride": (79, _S + "(OrtSessionOptions*, const char*, int64_t)"),
    "GetValue": (80, _S + "(const OrtValue*, int, OrtAllocator*, OrtValue**)"),
    "GetValueCount": (81, _S + "(const OrtValue*, size_t*)"),
    "ReleaseStatus": (93, "void (*)(OrtStatus*)"),
    "ReleaseSession": (95, "void (*)(OrtSession*)"),
    "ReleaseValue": (96, "void (*)(OrtValue*)"),
    "ReleaseRunOptions": (97, "void (*)(OrtRunOptions*)"),
    "ReleaseTypeInfo": (98, "void (*)(OrtTypeInfo*)"),
    "ReleaseTensorTypeAndShapeInfo": (99, "void (*)(OrtTensorTypeAndShapeInfo*)"),
    "ReleaseSessionOptions": (100, "void (*)(OrtSessionOptions*)"),
    "CastTypeInfoToMapTypeInfo": (103, _S + "(const OrtTypeInfo*, const OrtMapTypeInfo**)"),
    "CastTypeInfoToSequenceTypeInfo": (
        104,
        _S + "(const OrtTypeInfo*, const OrtSequenceTypeInfo**)",
    ),
    "GetMapKeyType": (105, _S + "(const OrtMapTypeInfo*, int*)"),
    "GetMapValueType": (106, _S + "(const OrtMapTypeInfo*, OrtTypeInfo**)"),
    "GetSequenceElementType": (107, _S + "(const OrtSequenceTypeInfo*, OrtTypeInfo**)"),
    "AddFreeDimensionOverrideByName": (124, _S + "(OrtSessionOptions*, const char*, int64_t)"),
    "AddSessionConfigEntry": (130, _S + "(OrtSessionOptions*, const char*, const char*)"),
    "AddRunConfigEntry": (165, _S + "(OrtRunOptions*, const char*, const char*)"),
    "HasValue": (192, _S + "(const OrtValue*, int*)"),
    "GetTensorMemoryInfo": (194, _S + "(const OrtValue*, const OrtMemoryInfo**)"),
    "SessionOptionsAppendExecutionProvider_CUDA_V2": (
        204,
        _S + "(OrtSessionOptions*, const OrtCUDAProviderOptionsV2*)",
    ),
    "CreateCUDAProviderOptions": (205, _S + "(OrtCUDAProviderOptionsV2**)"),
    "UpdateCUDAProviderOptions": (
        206,
        _S + "(OrtCUDAProviderOptionsV2*, const char* const*, const char* const*, size_t)",
    ),
    "ReleaseCUDAProviderOptions": (208, "void (*)(OrtCUDAProviderOptionsV2*)"),
    "MemoryInfoGetDeviceType": (225, "void (*)(const OrtMemoryInfo*, int*)"),
    "CastTypeInfoToOptionalTypeInfo": (
        250,
        _S + "(const OrtTypeInfo*, const OrtOptionalTypeInfo**)",
    ),
    "GetOptionalContainedTypeInfo": (251, _S + "(const OrtOptionalTypeInfo*, OrtTypeInfo**)"),
    "GetResizedStringTensorElementBuffer": (252, _S + "(OrtValue*, size_t, size_t, char**)"),
    "SetDeterministicCompute": (273, _S + "(OrtSessionOptions*, bool)"),
    "GetTensorElementTypeAndShapeDataReference": (
        414,
        _S + "(const OrtValue*, int*, const int64_t**, size_t*)",
    ),
    "RunOptionsEnableProfiling": (415, _S + "(OrtRunOptions*, const char*)"),
}

ERROR_CODE_NAMES = (
    "OK", "FAIL", "INVALID_ARGUMENT", "NO_SUCHFILE", "NO_MODEL", "ENGINE_ERROR",
    "RUNTIME_EXCEPTION", "INVALID_PROTOBUF", "MODEL_LOADED", "NOT_IMPLEMENTED", "INVALID_GRAPH",
    "EP_FAIL", "MODEL_LOAD_CANCELED", "MODEL_REQUIRES_COMPILATION", "NOT_FOUND", "DEVICE_RESET",
)  # fmt: skip
"""``OrtErrorCode`` names by value (onnxruntime_c_api.h / onnxruntime_error_code.h)."""

NOT_IMPLEMENTED = 9


def first_api_version(slot: int) -> int:
    """The lowest ``OrtApi`` version whose table contains ``slot``."""
    for version, last_slot in _VERSION_ENDS:
        if slot <= last_slot:
            return version
    raise ValueError(f"OrtApi slot {slot} is beyond the versions this binding knows")


class OrtError(RuntimeError):
    """A non-NULL ``OrtStatus*`` returned by an ORT C API function."""

    def __init__(self, code: int, message: str, function: str) -> None:
        self.code = code
        self.code_name = (
            ERROR_CODE_NAMES[code] if 0 <= code < len(ERROR_CODE_NAMES) else f"CODE_{code}"
        )
        self.message = message
        self.function = function
        super().__init__(f"{function} failed: {self.code_name}: {message}")


class UnsupportedValue(TypeError):
    """An input or output this binding cannot convert exactly as ORT's Python API would."""


class UnsupportedOutput(UnsupportedValue):
    """An output this binding cannot convert: a property of the model's output, so every run
    asking for it fails alike (unlike an input, which the next call may give in another form)."""


def default_library_path() -> Path:
    """The ``libonnxruntime.so.<version>`` shipped by the installed onnxruntime wheel."""
    spec = find_spec("onnxruntime")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "onnxruntime is not installed: pip install onnxruntime (or onnxruntime-gpu), "
            "or pass the path of libonnxruntime.so to load_api()"
        )
    capi_dirs = [Path(location) / "capi" for location in spec.submodule_search_locations]
    candidates = sorted(
        (path for d in capi_dirs for path in d.glob("libonnxruntime.so*")),
        key=lambda path: [int(n) for n in re.findall(r"\d+", path.name)],
    )
    if not candidates:
        raise FileNotFoundError(
            f"no libonnxruntime.so* in {', '.join(map(str, capi_dirs))}: this onnxruntime "
            "distribution does not ship the C API library; pass its path to load_api()"
        )
    return candidates[-1]


class CApi:
    """One loaded ``libonnxruntime``: its version, ``OrtApi`` functions, env and CPU objects."""

    def __init__(self, library_path: str) -> None:
        self.library_path = library_path
        try:
            self._lib = ffi.dlopen(library_path)
            base = self._lib.OrtGetApiBase()
        except (OSError, AttributeError) as exc:
            raise OSError(
                f"cannot load the ONNX Runtime C API from {library_path}: {exc}; pass the path "
                "of a libonnxruntime.so that exports OrtGetApiBase"
            ) from exc
        self.ort_version: str = ffi.string(base.GetVersionString()).decode()
        self.api_version, table = _get_api(base, self.ort_version)
        self.supports_run_profiling = self.api_version >= 25
        self._functions: dict[str, Any] = {
            name: ffi.cast(ctype, table[slot])
            for name, (slot, ctype) in _FUNCTIONS.items()
            if first_api_version(slot) <= self.api_version
        }
        self._lock = threading.Lock()
        renew_locks_in_child(self, "_lock")
        self._env: Any = None
        self._cpu_memory_info: Any = None
        self._allocator: Any = None

    def __repr__(self) -> str:
        return f"CApi({self.library_path!r}, ort {self.ort_version}, api {self.api_version})"

    def has(self, function_name: str) -> bool:
        """Whether this binding declares ``function_name`` and the library's API version has it."""
        return function_name in self._functions

    def function(self, name: str) -> Any:
        """The callable ``OrtApi`` function; ``OrtError(NOT_IMPLEMENTED)`` if the API lacks it."""
        try:
            return self._functions[name]
        except KeyError:
            if name not in _FUNCTIONS:
                raise
            needed = first_api_version(_FUNCTIONS[name][0])
            raise OrtError(
                NOT_IMPLEMENTED,
                f"needs ORT C API version {needed}; {self.library_path} is ONNX Runtime "
                f"{self.ort_version} (API {self.api_version})",
                name,
            ) from None

    def error(self, status: Any, function: str) -> OrtError:
        """Turn a non-NULL ``OrtStatus*`` into an ``OrtError`` and release the status."""
        try:
            code = self._functions["GetErrorCode"](status)
            message = ffi.string(self._functions["GetErrorMessage"](status))
        finally:
            self._functions["ReleaseStatus"](status)
        return OrtError(code, message.decode("utf-8", "replace"), function)

    def call(self, name: str, *args: Any) -> None:
        """Call an ``OrtStatus*``-returning function; raise ``OrtError`` on failure."""
        status = self.function(name)(*args)
        if status:
            raise self.error(status, name)

    @property
    def env(self) -> Any:
        """The ``OrtEnv*`` of this library (created on first use, kept for the process)."""
        return self._lazy("_env", self._create_env)

    @property
    def cpu_memory_info(self) -> Any:
        """An ``OrtMemoryInfo*`` for CPU memory owned by the caller (kept for the process)."""
        return self._lazy("_cpu_memory_info", self._create_cpu_memory_info)

    @property
    def allocator(self) -> Any:
        """ORT's default CPU ``OrtAllocator*`` (owned by ORT)."""
        return self._lazy("_allocator", self._get_allocator)

    def _lazy(self, attribute: str, create: Callable[[], Any]) -> Any:
        value = getattr(self, attribute)
        if value is None:
            with self._lock:
                value = getattr(self, attribute)
                if value is None:
                    value = create()
                    setattr(self, attribute, value)
        return value

    def _create_env(self) -> Any:
        env = ffi.new("OrtEnv**")
        self.call("CreateEnv", 2, b"otel-ort", env)  # ORT_LOGGING_LEVEL_WARNING
        return env[0]

    def _create_cpu_memory_info(self) -> Any:
        info = ffi.new("OrtMemoryInfo**")
        self.call("CreateCpuMemoryInfo", 1, 0, info)  # OrtArenaAllocator, OrtMemTypeDefault
        return info[0]

    def _get_allocator(self) -> Any:
        allocator = ffi.new("OrtAllocator**")
        self.call("GetAllocatorWithDefaultOptions", allocator)
        return allocator[0]


def _get_api(base: Any, ort_version: str) -> tuple[int, Any]:
    """The highest accepted API version and its table.

    ORT 1.x serves API version = its minor number; each version GetApi refuses makes ORT print
    a line to stderr, so the first guess comes from the version string.
    """
    match = re.match(r"1\.(\d+)\.", ort_version)
    version = min(int(match.group(1)), ORT_API_VERSION_KNOWN) if match else ORT_API_VERSION_KNOWN
    for candidate in range(version, 0, -1):
        table = base.GetApi(candidate)
        if table:
            return candidate, table
    raise OSError(f"ONNX Runtime {ort_version} accepted no OrtApi version 1..{version}")


_apis: dict[str, CApi] = {}
_apis_lock = threading.Lock()
renew_locks_in_child(sys.modules[__name__], "_apis_lock")


def load_api(library: str | os.PathLike[str] | None = None) -> CApi:
    """The ``CApi`` of ``library`` (default: the installed onnxruntime's), loaded once per path."""
    path = Path(library) if library is not None else default_library_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"ONNX Runtime library not found: {path}; install onnxruntime (or onnxruntime-gpu) "
            "or pass the path of an existing libonnxruntime.so"
        )
    key = os.path.realpath(path)
    with _apis_lock:
        api = _apis.get(key)
        if api is None:
            api = _apis[key] = CApi(str(path))
        return api

"""An ONNX Runtime session driven through the C API, with run-level profiling."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from otel_ort.capi.library import CApi, UnsupportedOutput, UnsupportedValue, ffi, load_api
from otel_ort.capi.values import (
    MAP,
    ONNX_TYPE_NAMES,
    OPTIONAL,
    SEQUENCE,
    SPARSE_TENSOR,
    TENSOR,
    ValueCodec,
    element_name,
)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_NAME_CACHE_LIMIT = 64
_VALUES = ffi.typeof("OrtValue*[]")


@dataclass(frozen=True)
class SessionConfig:
    """What ``CSession`` builds its ``OrtSessionOptions`` and session from.

    Enum fields take the C values: ``graph_optimization_level`` 0 disable, 1 basic, 2 extended,
    3 layout, 99 all; ``execution_mode`` 0 sequential, 1 parallel. ``use_deterministic_compute``
    needs API 17 (ORT 1.17) when True (``OrtError`` NOT_IMPLEMENTED otherwise); False is ORT's
    default and sets nothing. ``providers`` supports CPU (options ignored; ORT always appends it
    last, so it may not precede another provider) and CUDA (options as strings).
    """

    model: str | bytes
    """A model path, or the serialized model."""
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    graph_optimization_level: int = 99
    execution_mode: int = 0
    enable_mem_pattern: bool = True
    enable_cpu_mem_arena: bool = True
    use_deterministic_compute: bool = False
    log_severity_level: int = 2
    config_entries: Mapping[str, str] = field(default_factory=dict)
    free_dimension_overrides_by_name: Mapping[str, int] = field(default_factory=dict)
    free_dimension_overrides_by_denotation: Mapping[str, int] = field(default_factory=dict)
    providers: tuple[tuple[str, Mapping[str, str]], ...] = ((CPU, {}),)


class Termination:
    """Ends a ``CSession.run`` from any thread, as ``RunOptions.terminate = True`` ends ORT's
    own run: ``request()`` before the run (it then fails at once) or while it is in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = False
        self._terminate: Callable[[], None] | None = None

    @property
    def requested(self) -> bool:
        return self._requested

    def request(self) -> None:
        with self._lock:
            self._requested = True
            if self._terminate is not None:
                self._terminate()

    def attach(self, terminate: Callable[[], None]) -> None:
        """The run in flight (``CSession.run``): how to end it, until ``detach``."""
        with self._lock:
            self._terminate = terminate
            if self._requested:
                terminate()

    def detach(self) -> None:
        with self._lock:
            self._terminate = None


class CSession:
    """An ``OrtSession`` whose ``run`` returns what ``InferenceSession.run`` would.

    ``run`` may be called from several threads at once; ``close`` waits for runs in flight.
    The first profiled run of a session runs alone: concurrent with other runs, ORT 1.31's
    thread-pool profiler fails them ("LogStart must pair with LogEnd") or crashes the process.
    """

    def __init__(self, config: SessionConfig, api: CApi | None = None) -> None:
        self._api = api = api if api is not None else load_api()
        self._closed = False
        self._active = 0  # runs in flight
        self._alone = False  # a run that must be alone is in flight
        self._queued_alone = 0  # runs that must be alone, waiting for the others to finish
        self._waiting = 0  # threads waiting on _changed
        self._profiled = False  # a profiled run has completed
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        _ = api.env  # created first: its process-lifetime thread is not the session's
        before = _thread_ids()
        self._session = _create_session(api, config)
        self._model = config.model  # bytes may be used in place (session.use_ort_model_bytes_*)
        python_threads = {str(thread.native_id) for thread in threading.enumerate()}
        self.thread_ids = tuple(sorted(int(t) for t in _thread_ids() - before - python_threads))
        """OS ids of the threads ORT started for this session (its intra-op pool): the
        process's new threads while it was created, less Python's (a native thread another
        library started meanwhile would be counted too)."""
        self._calls = threading.local()
        self._release = weakref.finalize(self, _release_session, api, self._session)
        self._release.atexit = False  # ORT may already be tearing down at interpreter exit
        self._run = api.function("Run")
        self._release_value = api.function("ReleaseValue")
        self._codec = ValueCodec(api, check_device=any(name != CPU for name, _ in config.providers))
        self._names_cache: dict[tuple[str, ...], tuple[Any, list[Any]]] = {}
        self.input_names = self._names("SessionGetInputCount", "SessionGetInputName")
        self.output_names = self._names("SessionGetOutputCount", "SessionGetOutputName")
        self.input_types = tuple(
            self._type(api, "SessionGetInputTypeInfo", index, _type_string)
            for index in range(len(self.input_names))
        )
        self._converters: dict[str, Callable[[str, Any], Any]] = {
            name: self._converter(self._type(api, "SessionGetOutputTypeInfo", index, _onnx_type))
            for index, name in enumerate(self.output_names)
        }
        self._all_outputs = self._c_name_array(self.output_names)
        self.sequential = config.execution_mode == 0
        """Nodes run one at a time, each entered on the thread that called ``run``."""

    def __enter__(self) -> CSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> bool:
        """Release the session once every run in flight has returned (idempotent); ``False``
        if runs were still in flight after ``timeout`` seconds: it is then closed to new runs,
        and released when it is garbage collected (once those runs let go of it; not at
        interpreter exit, where ORT may already be tearing down)."""
        with self._lock:
            self._closed = True
            if not self._wait(lambda: self._active == 0, timeout):
                return False
        self._release()
        return True

    def abandon(self) -> None:
        """In a forked child: drop the parent's session without releasing it (its ORT threads
        do not exist here: releasing would wait for them or crash). Later runs raise."""
        self._release.detach()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = True

    def run(
        self,
        feeds: Mapping[str, Any],
        output_names: Sequence[str] | None = None,
        *,
        profile_prefix: str | None = None,
        run_tag: str | None = None,
        log_severity_level: int | None = None,
        run_config_entries: Mapping[str, str] | None = None,
        termination: Termination | None = None,
    ) -> list[Any]:
        """Run the model on numpy ``feeds``; outputs as ``InferenceSession.run`` returns them.

        ``profile_prefix`` enables ORT's run-level profiling (API 25+): the run writes
        ``<prefix>_<local time>.json``. ``termination`` can end the run from another thread.
        """
        alone = profile_prefix is not None and not self._profiled
        self._enter(alone)
        try:
            options = ffi.NULL
            if (
                profile_prefix is not None
                or run_tag is not None
                or log_severity_level is not None
                or run_config_entries
                or termination is not None
            ):
                options = _run_options(
                    self._api, profile_prefix, run_tag, log_severity_level, run_config_entries
                )
            completed = False
            try:
                if termination is not None:
                    termination.attach(partial(self._api.call, "RunOptionsSetTerminate", options))
                outputs = self._run_with(options, feeds, output_names)
                completed = True
                return outputs
            except UnsupportedOutput:  # the run completed: only an output could not be returned
                completed = True
                raise
            finally:
                if termination is not None:
                    termination.detach()
                if options:
                    self._api.function("ReleaseRunOptions")(options)
                if completed and profile_prefix is not None:
                    self._profiled = True
        finally:
            with self._lock:
                self._active -= 1
                if alone:
                    self._alone = False
                if self._waiting:
                    self._changed.notify_all()

    def _enter(self, alone: bool) -> None:
        """Admit a run (``alone``: once the runs in flight are done, holding new ones back
        meanwhile); ``RuntimeError`` if the session is closed."""
        with self._lock:
            if alone:
                self._queued_alone += 1
                try:
                    self._wait(lambda: self._closed or not (self._active or self._alone))
                finally:
                    self._queued_alone -= 1
            elif self._alone or self._queued_alone:
                self._wait(lambda: self._closed or not (self._alone or self._queued_alone))
            if self._closed:
                raise RuntimeError("CSession is closed")
            self._active += 1
            self._alone = alone

    def last_run_started_ns(self) -> int:
        """When this thread's last ``run`` called ORT (ns since the epoch): the closest
        available stand-in for a run-level profile's unrecorded start time."""
        started_ns = getattr(self._calls, "started_ns", None)
        if started_ns is None:
            raise RuntimeError("last_run_started_ns: this thread has not run the session")
        return int(started_ns)

    def _wait(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait, holding ``_lock``, until ``predicate()`` holds; ``False`` on timeout."""
        self._waiting += 1
        try:
            return self._changed.wait_for(predicate, timeout)
        finally:
            self._waiting -= 1

    def _run_with(
        self, options: Any, feeds: Mapping[str, Any], output_names: Sequence[str] | None
    ) -> list[Any]:
        names = tuple(output_names) if output_names else self.output_names  # [], as None
        output_c = self._c_name_array(names) if output_names else self._all_outputs
        input_c = self._c_name_array(tuple(feeds))  # its strings stay referenced until return
        keep: list[Any] = []  # what the input OrtValues point to
        count = len(feeds)
        values = ffi.new(_VALUES, count + len(names) or 1)  # inputs, then outputs
        outputs = values + count
        try:
            for index, (name, array) in enumerate(feeds.items()):
                self._codec.to_ort(name, array, values + index, keep)
            self._calls.started_ns = time.time_ns()
            status = self._run(
                self._session, options, input_c[0], values, count, output_c[0], len(names), outputs
            )
            if status:
                raise self._api.error(status, "Run")
            return [
                self._converters.get(name, self._codec.from_ort)(name, outputs[index])
                for index, name in enumerate(names)
            ]
        finally:
            for value in ffi.unpack(values, count + len(names)):
                if value:
                    self._release_value(value)

    def _names(self, count_function: str, name_function: str) -> tuple[str, ...]:
        api = self._api
        count = ffi.new("size_t*")
        api.call(count_function, self._session, count)
        names = []
        for index in range(count[0]):
            name = ffi.new("char**")
            api.call(name_function, self._session, index, api.allocator, name)
            try:
                names.append(ffi.string(name[0]).decode())
            finally:
                api.call("AllocatorFree", api.allocator, name[0])
        return tuple(names)

    def _c_name_array(self, names: tuple[str, ...]) -> tuple[Any, list[Any]]:
        """A ``const char*[]`` of ``names`` and the strings it points to, cached per name list."""
        entry = self._names_cache.get(names)
        if entry is None:
            strings = [ffi.new("char[]", name.encode()) for name in names]
            entry = (ffi.new("const char*[]", strings or [ffi.NULL]), strings)
            if len(self._names_cache) < _NAME_CACHE_LIMIT:
                self._names_cache[names] = entry
        return entry

    def _type(
        self, api: CApi, function: str, index: int, describe: Callable[[CApi, Any], Any]
    ) -> Any:
        info = ffi.new("OrtTypeInfo**")
        api.call(function, self._session, index, info)
        try:
            return describe(api, info[0])
        finally:
            api.function("ReleaseTypeInfo")(info[0])

    def _converter(self, onnx_type: int) -> Callable[[str, Any], Any]:
        if onnx_type == TENSOR:
            return self._codec.tensor
        if onnx_type == OPTIONAL:
            return self._codec.optional_from_ort
        return self._codec.from_ort


def _create_session(api: CApi, config: SessionConfig) -> Any:
    options = ffi.new("OrtSessionOptions**")
    api.call("CreateSessionOptions", options)
    try:
        _apply(api, options[0], config)
        session = ffi.new("OrtSession**")
        if isinstance(config.model, bytes):
            data = ffi.from_buffer(config.model)
            api.call(
                "CreateSessionFromArray", api.env, data, len(config.model), options[0], session
            )
        else:
            api.call("CreateSession", api.env, os.fsencode(config.model), options[0], session)
        return session[0]
    finally:
        api.function("ReleaseSessionOptions")(options[0])


def _apply(api: CApi, options: Any, config: SessionConfig) -> None:
    """Copy ``config`` into ``OrtSessionOptions*``."""
    api.call("SetIntraOpNumThreads", options, config.intra_op_num_threads)
    api.call("SetInterOpNumThreads", options, config.inter_op_num_threads)
    api.call("SetSessionGraphOptimizationLevel", options, config.graph_optimization_level)
    api.call("SetSessionExecutionMode", options, config.execution_mode)
    api.call("EnableMemPattern" if config.enable_mem_pattern else "DisableMemPattern", options)
    api.call("EnableCpuMemArena" if config.enable_cpu_mem_arena else "DisableCpuMemArena", options)
    if config.use_deterministic_compute:
        api.call("SetDeterministicCompute", options, True)
    api.call("SetSessionLogSeverityLevel", options, config.log_severity_level)
    for key, value in config.config_entries.items():
        api.call("AddSessionConfigEntry", options, key.encode(), value.encode())
    for name, size in config.free_dimension_overrides_by_name.items():
        api.call("AddFreeDimensionOverrideByName", options, name.encode(), size)
    for denotation, size in config.free_dimension_overrides_by_denotation.items():
        api.call("AddFreeDimensionOverride", options, denotation.encode(), size)
    names = [name for name, _ in config.providers]
    for position, (name, provider_options) in enumerate(config.providers):
        if name == CPU:
            if any(other != CPU for other in names[position:]):
                raise UnsupportedValue(
                    f"providers {names}: ORT's C API always puts {CPU} last; it cannot come "
                    "before another provider"
                )
        elif name == CUDA:
            _append_cuda(api, options, provider_options)
        else:
            raise UnsupportedValue(
                f"execution provider {name!r} is not supported by otel_ort.capi "
                f"(supported: {CPU}, {CUDA})"
            )


def _append_cuda(api: CApi, options: Any, provider_options: Mapping[str, str]) -> None:
    out = ffi.new("OrtCUDAProviderOptionsV2**")
    api.call("CreateCUDAProviderOptions", out)  # fails on builds without CUDA
    cuda = out[0]
    try:
        keys = [ffi.new("char[]", str(key).encode()) for key in provider_options]
        values = [ffi.new("char[]", str(value).encode()) for value in provider_options.values()]
        api.call(
            "UpdateCUDAProviderOptions",
            cuda,
            ffi.new("const char*[]", keys or [ffi.NULL]),
            ffi.new("const char*[]", values or [ffi.NULL]),
            len(keys),
        )
        api.call("SessionOptionsAppendExecutionProvider_CUDA_V2", options, cuda)
    finally:
        api.function("ReleaseCUDAProviderOptions")(cuda)


def _run_options(
    api: CApi,
    profile_prefix: str | None,
    run_tag: str | None,
    log_severity_level: int | None,
    config_entries: Mapping[str, str] | None,
) -> Any:
    """A new ``OrtRunOptions*`` (the caller releases it)."""
    out = ffi.new("OrtRunOptions**")
    api.call("CreateRunOptions", out)
    options = out[0]
    try:
        if profile_prefix is not None:
            api.call("RunOptionsEnableProfiling", options, os.fsencode(profile_prefix))
        if run_tag is not None:
            api.call("RunOptionsSetRunTag", options, run_tag.encode())
        if log_severity_level is not None:
            api.call("RunOptionsSetRunLogSeverityLevel", options, log_severity_level)
        for key, value in (config_entries or {}).items():
            api.call("AddRunConfigEntry", options, key.encode(), value.encode())
    except BaseException:
        api.function("ReleaseRunOptions")(options)
        raise
    return options


def _onnx_type(api: CApi, info: Any) -> int:
    kind = ffi.new("int*")
    api.call("GetOnnxTypeFromTypeInfo", info, kind)
    return int(kind[0])


def _type_string(api: CApi, info: Any) -> str:
    """ORT's Python spelling of a type: ``tensor(float)``, ``seq(map(int64,tensor(float)))``."""
    kind = _onnx_type(api, info)
    if kind in (TENSOR, SPARSE_TENSOR):
        tensor = ffi.new("OrtTensorTypeAndShapeInfo**")
        element = ffi.new("int*")
        api.call("CastTypeInfoToTensorInfo", info, tensor)
        api.call("GetTensorElementType", tensor[0], element)
        return f"{ONNX_TYPE_NAMES[kind]}({element_name(element[0])})"
    inner = ffi.new("OrtTypeInfo**")
    if kind == SEQUENCE:
        sequence = ffi.new("OrtSequenceTypeInfo**")
        api.call("CastTypeInfoToSequenceTypeInfo", info, sequence)
        api.call("GetSequenceElementType", sequence[0], inner)
        prefix = "seq("
    elif kind == MAP:
        map_info = ffi.new("OrtMapTypeInfo**")
        key = ffi.new("int*")
        api.call("CastTypeInfoToMapTypeInfo", info, map_info)
        api.call("GetMapKeyType", map_info[0], key)
        api.call("GetMapValueType", map_info[0], inner)
        prefix = f"map({element_name(key[0])},"
    elif kind == OPTIONAL:
        optional = ffi.new("OrtOptionalTypeInfo**")
        api.call("CastTypeInfoToOptionalTypeInfo", info, optional)
        api.call("GetOptionalContainedTypeInfo", optional[0], inner)
        prefix = "optional("
    else:
        return ONNX_TYPE_NAMES[kind] if kind < len(ONNX_TYPE_NAMES) else "unknown"
    try:
        return f"{prefix}{_type_string(api, inner[0])})"
    finally:
        api.function("ReleaseTypeInfo")(inner[0])


def _release_session(api: CApi, session: Any) -> None:
    api.function("ReleaseSession")(session)


def _thread_ids() -> set[str]:
    return set(os.listdir("/proc/self/task"))

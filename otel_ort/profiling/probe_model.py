"""A one-node ONNX model (``y = Relu(x)``, ``x`` a float vector of any length), encoded here
field by field so that no ``onnx`` package is needed.

otel-ort runs it on a private session: once per process, to prove by behaviour that it found
the run-level profiling fields of ORT's ``RunOptions`` (``run_options_layout``); and, on a
thread whose thread-pool profiler log grows, to have ORT clear that log (``pool_log``). With
a long enough ``x``, its one node runs a parallel section on the session's intra-op pool.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

INPUT = "x"
OUTPUT = "y"
OPSET = 13
IR_VERSION = 8
_CPU = ["CPUExecutionProvider"]


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


class PoolBusy(Exception):
    """A private session's first profiled run could not run alone in time (ORT's global
    thread pool, shared with busy sessions): try again later."""


class PrivateSession:
    """otel-ort's own session of the model: ORT's own run (not otel-ort's wrapper: never
    traced, never profiled by the sampler), on a pool of ``threads`` of its own, or on ORT's
    global thread pool where the process has one (ORT then refuses a pool of its own). Its
    first profiled run passes its pool's gate, as a user's session's does."""

    def __init__(self, onnxruntime: Any, threads: int) -> None:
        from opentelemetry.instrumentation.utils import suppress_instrumentation

        with suppress_instrumentation():  # no span for otel-ort's own session
            self.session = _session(onnxruntime, threads)
        self._run = inspect.unwrap(onnxruntime.InferenceSession.run)
        self._primed = False
        self._lock = threading.Lock()

    def run(self, feeds: dict[str, Any], run_options: Any = None) -> None:
        """One run; a profiled one first through the pool's gate (``PoolBusy`` if the pool
        did not come free in time)."""
        if self._primed or run_options is None:
            self._run(self.session, None, feeds, run_options)
            return
        from otel_ort.profiling.session_runs import session_runs

        with self._lock:
            if self._primed:
                self._run(self.session, None, feeds, run_options)
                return
            runs = session_runs(self.session)
            window = runs.begin_profiled()
            if window is None:
                raise PoolBusy("ORT's global thread pool did not come free for a first profile")
            completed = False
            try:
                self._run(self.session, None, feeds, run_options)
                completed = True
            finally:
                runs.end_profiled(window, completed=completed)
            self._primed = True


def _session(onnxruntime: Any, threads: int) -> Any:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    try:
        return onnxruntime.InferenceSession(relu_model(), options, providers=_CPU)
    except Exception as exc:  # ORT's own exception type
        if "use_per_session_threads must be false" not in str(exc):
            raise
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.use_per_session_threads = False
    return onnxruntime.InferenceSession(relu_model(), options, providers=_CPU)

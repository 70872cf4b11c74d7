"""A cffi (ABI mode) binding of ONNX Runtime's C API, for run-level profiled twin sessions.

``CSession`` runs a model in the ``libonnxruntime`` that the onnxruntime wheel ships beside its
Python module (a separate copy of ORT) and returns what ``InferenceSession.run`` would return.
"""

from otel_ort.capi.library import CApi, OrtError, UnsupportedOutput, UnsupportedValue, load_api
from otel_ort.capi.session import CSession, SessionConfig, Termination

__all__ = [
    "CApi",
    "CSession",
    "OrtError",
    "SessionConfig",
    "Termination",
    "UnsupportedOutput",
    "UnsupportedValue",
    "load_api",
]

"""``OrtInstrumentor``: wraps ONNX Runtime's Python session class with otel-ort's wrappers.

The methods are replaced on the classes, so sessions created before ``instrument()`` are
covered too; what each wrapper records is in :mod:`otel_ort.wrappers`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from otel_ort.options import BASE_KEYS, Options, parse_options
from otel_ort.package import _instruments, _instruments_any
from otel_ort.wrappers import RUN_METHODS, RunTelemetry

_SESSION_MODULE = "onnxruntime.capi.onnxruntime_inference_collection"


class OrtInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """OpenTelemetry instrumentation for ONNX Runtime ``InferenceSession``.

    ``OrtInstrumentor().instrument(tracer_provider=None, meter_provider=None,
    request_hook=None, response_hook=None)``; see ``README.md`` for what each run records.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _check_dependency_conflicts(self) -> DependencyConflict | None:
        # any one ORT distribution will do (the base class would require all of them)
        return get_dependency_conflicts(_instruments, _instruments_any)

    def instrument(self, **kwargs: Any) -> None:
        """Wrap ONNX Runtime; bad options raise here, before anything is wrapped."""
        options = parse_options(kwargs)
        base = {key: value for key, value in kwargs.items() if key in BASE_KEYS}
        super().instrument(options=options, **base)

    def _instrument(self, *, options: Options, **_: Any) -> None:
        from onnxruntime.capi import onnxruntime_inference_collection as collection

        telemetry = RunTelemetry(options)
        wrap_function_wrapper(_SESSION_MODULE, "InferenceSession.__init__", telemetry.init_wrapper)
        wrappers = {method: telemetry.run_wrapper(method) for method in RUN_METHODS}
        wrappers["run_async"] = telemetry.run_async_wrapper
        for method, wrapper in wrappers.items():
            if hasattr(collection.Session, method):  # older ORT releases lack some of them
                wrap_function_wrapper(_SESSION_MODULE, f"Session.{method}", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        from onnxruntime.capi import onnxruntime_inference_collection as collection

        unwrap(collection.InferenceSession, "__init__")
        for method in (*RUN_METHODS, "run_async"):
            unwrap(collection.Session, method)

"""``OrtInstrumentor``: wraps ONNX Runtime's Python session class with otel-ort's wrappers.

The methods are replaced on the classes (:mod:`otel_ort.instrumentation.method_patches`), so
sessions created before ``instrument()`` are covered too; what each run records is in
:mod:`otel_ort.instrumentation.wrappers`, what a session's construction records in
:mod:`otel_ort.instrumentation.session_creation`."""

from __future__ import annotations

from collections.abc import Collection
from functools import partial
from typing import Any

from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from otel_ort.export.configure import wait_before_shutdown
from otel_ort.instrumentation.method_patches import Patch, patch, restore
from otel_ort.instrumentation.metrics import Instruments
from otel_ort.instrumentation.options import BASE_KEYS, Options, parse_options
from otel_ort.instrumentation.session_creation import init_method
from otel_ort.instrumentation.wrappers import RUN_METHODS, RunTelemetry
from otel_ort.package import _instruments, _instruments_any
from otel_ort.profiling.recorded_options import install_recorders, uninstall_recorders


class OrtInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """OpenTelemetry instrumentation for ONNX Runtime ``InferenceSession``.

    ``OrtInstrumentor().instrument(tracer_provider=None, meter_provider=None,
    request_hook=None, response_hook=None, profile_sampler=None, profile_dir=None,
    profile_max_files=None, profile_max_bytes=None, profile_mode=None,
    profile_conversion=None, ...)``; see ``README.md``
    for what each run records and which runs are profiled.
    """

    _profiler: Any = None
    _telemetry: Any = None
    _patches: tuple[Patch, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _check_dependency_conflicts(self) -> DependencyConflict | None:
        # any one ORT distribution will do (the base class would require all of them)
        return get_dependency_conflicts(_instruments, _instruments_any)

    def instrument(self, **kwargs: Any) -> None:
        """Wrap ONNX Runtime; bad options raise here, before anything is wrapped. Once
        instrumented, a second call only warns (the base class's), its options unread."""
        if self._is_instrumented_by_opentelemetry:
            super().instrument()
            return
        options = parse_options(kwargs)
        base = {key: value for key, value in kwargs.items() if key in BASE_KEYS}
        super().instrument(options=options, **base)

    def _instrument(self, *, options: Options, **_: Any) -> None:
        from onnxruntime.capi import onnxruntime_inference_collection as collection

        instruments = Instruments(options.meter_provider)  # every metric instrument, once
        profiler = None
        if options.profiling.mode != "off":
            from otel_ort.profiling.profiler import Profiler

            profiler = Profiler(options.profiling, instruments, options.tracer_provider)
            install_recorders(collection.C)
        self._profiler = profiler
        telemetry = self._telemetry = RunTelemetry(options, instruments, profiler)
        made = [patch(collection.InferenceSession, "__init__", partial(init_method, telemetry))]
        for method in RUN_METHODS:
            made.append(patch(collection.Session, method, partial(telemetry.run_method, method)))
        made.append(patch(collection.Session, "run_async", telemetry.run_async_method))
        self._patches = tuple(each for each in made if each is not None)

    def _uninstrument(self, **kwargs: Any) -> None:
        for each in reversed(self._patches):
            restore(each)
        self._patches = ()
        self._telemetry.inert = True  # for bound methods taken while instrumented
        self._telemetry = None
        if self._profiler is not None:
            self._profiler.shutdown()  # first: profiled runs in flight still follow terminate
            uninstall_recorders()
            self._profiler = None


def flush_profiles(timeout: float | None = None) -> bool:
    """Wait until profiled runs so far are converted, then
    flush the tracer provider; ``False`` if ``timeout`` seconds were not enough or the
    provider's flush failed (a span processor's ``force_flush`` said so). For batch
    jobs and tests; interpreter exit does the same by itself."""
    profiler = OrtInstrumentor()._profiler
    return True if profiler is None else bool(profiler.flush(timeout))


def wait_for_profiles(timeout: float) -> bool:
    """Wait until profiled runs so far are converted: their spans handed to the provider's
    span processors, not yet exported (``Telemetry.shutdown`` exports them within its own
    timeout); ``False`` if ``timeout`` seconds were not enough."""
    profiler = OrtInstrumentor()._profiler
    return True if profiler is None else bool(profiler.worker.drain(timeout))


# configure()'s shutdown first waits for profiled runs being converted (export/ does not
# import the instrumentor: this is where the two meet)
wait_before_shutdown(wait_for_profiles)

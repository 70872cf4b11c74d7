"""The instruments otel-ort records into the user's MeterProvider: ``Instruments``, made once
by ``instrument()`` and handed to what records (the run wrappers, the profiling engine).

``configure()``'s own ``otel_ort.spans.dropped`` counter belongs to the export pipeline
(``otel_ort.export``), not here."""

from __future__ import annotations

from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider, get_meter

from otel_ort import semconv
from otel_ort.version import __version__

# Bounds in seconds, from 50 µs (small models on CPU) to 10 s (large ones); the SDK's default
# bounds are meant for milliseconds and would put every run in the first bucket.
RUN_DURATION_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


def run_duration_histogram(meter: Meter) -> Histogram:
    """``onnxruntime.run.duration``: seconds per run, by model, provider, profiled, error.type."""
    return meter.create_histogram(
        semconv.METRIC_RUN_DURATION,
        unit="s",
        description="Duration of ONNX Runtime inference runs.",
        explicit_bucket_boundaries_advisory=RUN_DURATION_BUCKETS,
    )


class Instruments:
    """Every instrument of one ``instrument()`` call, made from its meter provider (``None``:
    the global one), under the meter ``otel_ort``."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = get_meter("otel_ort", __version__, meter_provider)
        self.run_duration: Histogram = run_duration_histogram(meter)
        """``onnxruntime.run.duration``: recorded by the run wrappers (by the profiler's worker
        for a profiled run)."""
        self.profile_runs: Counter = meter.create_counter(
            semconv.METRIC_PROFILE_RUNS, "{run}", "Runs selected for profiling, by outcome."
        )
        """``onnxruntime.profile.runs``, by ``onnxruntime.profile.outcome``."""
        self.profile_spans_dropped: Counter = meter.create_counter(
            semconv.METRIC_PROFILE_SPANS_DROPPED, "{span}", "Profile spans that were dropped."
        )
        """``onnxruntime.profile.spans.dropped``: node and kernel spans over the byte budget."""
        self.profile_files_deleted: Counter = meter.create_counter(
            semconv.METRIC_PROFILE_FILES_DELETED, "{file}", "Profile files deleted by retention."
        )
        """``onnxruntime.profile.files.deleted``: kept files removed by retention."""

"""The instruments otel-ort records into the user's MeterProvider."""

from __future__ import annotations

from opentelemetry.metrics import Histogram, Meter

from otel_ort import semconv

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

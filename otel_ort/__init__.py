"""otel-ort: OpenTelemetry instrumentation for ONNX Runtime.

>>> from otel_ort import OrtInstrumentor
>>> OrtInstrumentor().instrument()   # every InferenceSession run becomes a span
"""

from otel_ort.export.pipeline import configure
from otel_ort.instrumentation import OrtInstrumentor, flush_profiles
from otel_ort.sampling import profile_next_run
from otel_ort.version import __version__

__all__ = ["OrtInstrumentor", "__version__", "configure", "flush_profiles", "profile_next_run"]

"""otel-ort: OpenTelemetry instrumentation for ONNX Runtime.

>>> from otel_ort import OrtInstrumentor
>>> OrtInstrumentor().instrument()   # every InferenceSession run becomes a span
"""

from otel_ort.export.configure import configure, wait_before_shutdown
from otel_ort.instrumentation import OrtInstrumentor, flush_profiles, wait_for_profiles
from otel_ort.sampling import profile_next_run
from otel_ort.version import __version__

# configure()'s shutdown first waits for profiled runs being converted (export/ does not
# import the instrumentor: this is where the two meet)
wait_before_shutdown(wait_for_profiles)

__all__ = ["OrtInstrumentor", "__version__", "configure", "flush_profiles", "profile_next_run"]

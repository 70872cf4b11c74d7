"""otel-ort: OpenTelemetry instrumentation for ONNX Runtime.

>>> from otel_ort import OrtInstrumentor
>>> OrtInstrumentor().instrument()   # every InferenceSession run becomes a span

The public names are imported when first used (PEP 562), so that importing one of otel-ort's
modules does not import the rest: the conversion process needs neither ONNX Runtime nor the
exporters.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from otel_ort.version import __version__

if TYPE_CHECKING:
    from otel_ort.export.configure import configure
    from otel_ort.instrumentation import OrtInstrumentor, flush_profiles
    from otel_ort.sampling import profile_next_run

_HOMES = {
    "OrtInstrumentor": "otel_ort.instrumentation",
    "configure": "otel_ort.export.configure",
    "flush_profiles": "otel_ort.instrumentation",
    "profile_next_run": "otel_ort.sampling",
}

__all__ = ["OrtInstrumentor", "__version__", "configure", "flush_profiles", "profile_next_run"]


def __getattr__(name: str) -> Any:
    """A public name, or a submodule (``otel_ort.semconv`` after ``import otel_ort``)."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"otel_ort.{name}") is not None:
        value = importlib.import_module(f"otel_ort.{name}")
    else:
        raise AttributeError(f"module 'otel_ort' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})

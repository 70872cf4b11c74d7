"""Whether to use the optional C parts of a profile's conversion (``setup.py``).

Each stands in for Python code that gives the same output, and is used where it was built
(a C compiler at install), unless ``OTEL_ORT_NATIVE=off``. Each module that has one imports
it, and drops it when this says no.
"""

from __future__ import annotations

import logging
import os

from otel_ort.environment_variables import OTEL_ORT_NATIVE

_logger = logging.getLogger("otel_ort")


def _wanted() -> bool:
    value = os.environ.get(OTEL_ORT_NATIVE, "on").strip().lower()
    if value not in ("on", "off"):
        _logger.warning(
            "otel-ort: %s=%r is neither 'on' nor 'off'; using the C parts (set it to 'off' "
            "to run the Python code instead)",
            OTEL_ORT_NATIVE,
            value,
        )
    return value != "off"


NATIVE_WANTED = _wanted()
"""Whether the C parts are used where they were built (``OTEL_ORT_NATIVE``)."""

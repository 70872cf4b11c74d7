"""A bound on the text otel-ort puts in attributes and span names.

The SDK bounds attribute values only when told (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``)
and span names never, while a model's node names, a CUDA kernel's name, a model's path or an
input's name are as long as their source makes them. otel-ort clips each such text itself;
a provider's smaller limit still applies on top.
"""

from __future__ import annotations

MAX_TEXT = 1024
"""Characters; a clipped text ends in "…" (within the bound)."""


def clip(text: str) -> str:
    """``text`` if it is at most ``MAX_TEXT`` characters, else its start and "…"."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"

"""Version of the otel-ort distribution."""

__version__ = "0.1.0"

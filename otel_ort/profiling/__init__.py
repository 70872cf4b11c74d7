"""ONNX Runtime profiles: reading the Chrome-trace JSON ORT writes, run by run."""

from otel_ort.profiling.model import KernelRecord, NodeRecord, Profile, RunRecord
from otel_ort.profiling.reader import ProfileError, read_profile

__all__ = ["KernelRecord", "NodeRecord", "Profile", "ProfileError", "RunRecord", "read_profile"]

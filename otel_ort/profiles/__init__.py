"""ONNX Runtime profiles: reading the Chrome-trace JSON ORT writes, run by run."""

from otel_ort.profiles.reader import ProfileError, read_profile
from otel_ort.profiles.records import KernelRecord, NodeRecord, Profile, RunRecord

__all__ = ["KernelRecord", "NodeRecord", "Profile", "ProfileError", "RunRecord", "read_profile"]

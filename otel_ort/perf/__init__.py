"""Linux perf_event counters attributed to ONNX Runtime nodes."""

"""Every span name, attribute name and metric name otel-ort emits, in one place.

``docs/semantic-conventions.md`` documents each of them; keep the two in step.
"""

from typing import Final

# Span names
SPAN_RUN: Final = "onnxruntime.run"
SPAN_SESSION_CREATE: Final = "onnxruntime.session.create"

# Model facts (computed once per session)
MODEL_PATH: Final = "onnxruntime.model.path"
MODEL_GRAPH_NAME: Final = "onnxruntime.model.graph_name"
MODEL_PRODUCER: Final = "onnxruntime.model.producer"

# Session facts (computed once per session)
SESSION_ID: Final = "onnxruntime.session.id"
SESSION_PROVIDERS: Final = "onnxruntime.session.providers"
SESSION_PROVIDER: Final = "onnxruntime.session.provider"
SESSION_GRAPH_OPTIMIZATION_LEVEL: Final = "onnxruntime.session.graph_optimization_level"
SESSION_EXECUTION_MODE: Final = "onnxruntime.session.execution_mode"
SESSION_INTRA_OP_NUM_THREADS: Final = "onnxruntime.session.intra_op_num_threads"
SESSION_INTER_OP_NUM_THREADS: Final = "onnxruntime.session.inter_op_num_threads"
ONNXRUNTIME_VERSION: Final = "onnxruntime.version"

# Run facts
RUN_METHOD: Final = "onnxruntime.run.method"
RUN_INPUTS: Final = "onnxruntime.run.inputs"
RUN_PROFILED: Final = "onnxruntime.run.profiled"
RUN_PROVIDER_FALLBACK: Final = "onnxruntime.run.provider_fallback"

# General semantic conventions reused as they are
ERROR_TYPE: Final = "error.type"

# Metrics
METRIC_RUN_DURATION: Final = "onnxruntime.run.duration"

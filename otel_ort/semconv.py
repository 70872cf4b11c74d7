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

# Runs selected for profiling (live run span)
PROFILE_SKIP_REASON: Final = "onnxruntime.profile.skip_reason"
"""Why a run selected for profiling was not profiled; one of the ``SKIP_*`` values."""
PROFILE_SKIP_DETAIL: Final = "onnxruntime.profile.skip_detail"
PROFILE_ERROR: Final = "onnxruntime.profile.error"
"""A profiled run whose profile could not be read or kept: what went wrong."""
SKIP_VALUE: Final = "value_not_supported"
"""``run_options`` is not a ``RunOptions``: ORT's own run refuses it."""
SKIP_RUN_OPTIONS: Final = "run_options_unknown"
"""The caller's ``RunOptions`` was made before ``instrument()``: it cannot be copied whole."""
SKIP_LAYOUT: Final = "layout_unrecognized"
"""This onnxruntime's ``RunOptions`` was not recognised: run-level profiling cannot be set."""
SKIP_SESSION_PROFILING: Final = "session_profiling"
"""The session profiles itself (``SessionOptions.enable_profiling``): ORT ignores run-level
profiling then."""
SKIP_CUDA_GRAPH: Final = "cuda_graph"
"""The session replays CUDA graphs (``enable_cuda_graph``): a replayed run executes no node, so
there is nothing to profile, and the run is left as it is."""
SKIP_SESSION_BUSY: Final = "session_busy"
"""The session's first profiled run waited too long for the session's runs in flight."""
SKIP_BACKLOG: Final = "backlog_full"
SKIP_UNAVAILABLE: Final = "profiling_unavailable"
SKIP_INTERNAL: Final = "internal_error"
PROFILE_ERROR_OUTCOME: Final = "profile_error"
"""Outcome counted for a profiled run whose profile could not be read or kept."""
RUN_FAILED_OUTCOME: Final = "run_failed"
"""Outcome counted for a profiled run that ORT failed (it raised, as it would have anyway)."""

# Profiled runs (run span)
PROFILE_FILE: Final = "onnxruntime.profile.file"
PROFILE_START_SOURCE: Final = "onnxruntime.profile.start_source"
PROFILE_TRUNCATED: Final = "onnxruntime.profile.truncated"
PROFILE_SPANS_DROPPED: Final = "onnxruntime.profile.spans_dropped"
PROFILE_OVERLAPPING_RUNS: Final = "onnxruntime.profile.overlapping_runs"
"""Other runs of the session in flight during the profiled run: they share its intra-op pool
(whose threads' perf counts include their work) and its CPUs."""
RUN_INDEX: Final = "onnxruntime.run.index"
RUN_COMPLETE: Final = "onnxruntime.run.complete"
RUN_NODE_COUNT: Final = "onnxruntime.run.node_count"
RUN_NODES_NOT_EMITTED: Final = "onnxruntime.run.nodes_not_emitted"
RUN_NOT_EMITTED_OP_TYPES: Final = "onnxruntime.run.not_emitted.op_types"
RUN_NOT_EMITTED_COUNTS: Final = "onnxruntime.run.not_emitted.counts"
RUN_NOT_EMITTED_DURATIONS_US: Final = "onnxruntime.run.not_emitted.durations_us"
RUN_KERNELS_NOT_EMITTED: Final = "onnxruntime.run.kernels_not_emitted"
RUN_NOT_EMITTED_LIMIT: Final = "onnxruntime.run.not_emitted.limit"
"""Which limit left spans out first: ``max_node_spans`` or ``max_trace_bytes``."""
RUN_EMITTED_BYTES: Final = "onnxruntime.run.emitted_bytes"
"""Bytes of the node and kernel spans emitted, as OTLP protobuf (``max_trace_bytes`` bounds
them); set with ``RUN_NOT_EMITTED_LIMIT``."""
RUN_UNMATCHED_KERNELS: Final = "onnxruntime.run.unmatched_kernels"

# Node spans (one per Node event of a profiled run)
NODE_NAME: Final = "onnxruntime.node.name"
NODE_OP_TYPE: Final = "onnxruntime.node.op_type"
NODE_PROVIDER: Final = "onnxruntime.node.provider"
NODE_INDEX: Final = "onnxruntime.node.index"
NODE_DURATION_US: Final = "onnxruntime.node.duration_us"
NODE_INPUT_SHAPES: Final = "onnxruntime.node.input_shapes"
NODE_OUTPUT_SHAPES: Final = "onnxruntime.node.output_shapes"
NODE_SIZE_PREFIX: Final = "onnxruntime.node."
"""+ ``output_size``, ``activation_size``, ``parameter_size`` and ORT's ``mem_*`` statistics."""
NODE_THREAD_POOL: Final = "onnxruntime.node.threads.pool"
NODE_THREADS_USED: Final = "onnxruntime.node.threads.used"
NODE_THREAD_TASKS: Final = "onnxruntime.node.threads.tasks"
NODE_MAIN_THREAD_RUN_US: Final = "onnxruntime.node.threads.main_run_us"
NODE_MAIN_THREAD_WAIT_US: Final = "onnxruntime.node.threads.main_wait_us"

# Kernel spans (GPU kernels under their node)
KERNEL_NAME: Final = "onnxruntime.kernel.name"
KERNEL_OP_NAME: Final = "onnxruntime.kernel.op_name"
KERNEL_GRID: Final = "onnxruntime.kernel.grid"
KERNEL_BLOCK: Final = "onnxruntime.kernel.block"
KERNEL_STREAM: Final = "onnxruntime.kernel.stream"
KERNEL_UNMATCHED: Final = "onnxruntime.kernel.unmatched"

# General semantic conventions reused as they are
ERROR_TYPE: Final = "error.type"
THREAD_ID: Final = "thread.id"

# Metrics
METRIC_RUN_DURATION: Final = "onnxruntime.run.duration"
METRIC_PROFILE_RUNS: Final = "onnxruntime.profile.runs"
"""Runs selected for profiling, by ``onnxruntime.profile.outcome``."""
PROFILE_OUTCOME: Final = "onnxruntime.profile.outcome"
"""``profiled`` or the skip reason."""
METRIC_PROFILE_SPANS_DROPPED: Final = "onnxruntime.profile.spans.dropped"
METRIC_PROFILE_FILES_DELETED: Final = "onnxruntime.profile.files.deleted"
METRIC_SPANS_DROPPED: Final = "otel_ort.spans.dropped"
"""Spans ``otel_ort.configure()``'s pipeline dropped, by ``otel_ort.stream`` and ``error.type``."""
EXPORT_STREAM: Final = "otel_ort.stream"
"""``requests`` (the tracer's spans) or ``profiles`` (node and kernel spans of profiled runs)."""

# perf counters (``<alias>`` is the event's alias: ``perf.task-clock``, ``perf.cyc``)
PERF_PREFIX: Final = "perf."
"""Node span: the node's count; run span: the run's exact total (task-clock in ns)."""
PERF_TIME_ALIASES: Final = ("task-clock", "cpu-clock")
"""Aliases of the software events counted in ns (shown as times)."""
PERF_BETWEEN_PREFIX: Final = "perf.between_nodes."
"""Run span: counted inside the run but outside every node's window."""
PERF_SCALING_PREFIX: Final = "perf.scaling."
"""Run span: a multiplexed counter's time enabled / time running (values are scaled by it)."""
PERF_THREAD_IDS: Final = "perf.thread_ids"
"""Node span: OS ids of the threads that ran on a CPU during the node (when more than one)."""
PERF_BY_THREAD_SUFFIX: Final = ".by_thread"
"""Node span ``perf.<alias>.by_thread``: the count per thread, aligned with ``perf.thread_ids``."""
PERF_NOT_COUNTED: Final = "perf.not_counted"
"""Node span: aliases whose counter never ran during the node (multiplexed out): absent."""
PERF_SAMPLE_PERIOD_NS: Final = "perf.sample_period_ns"
PERF_THREADS: Final = "perf.threads"
PERF_THROTTLED: Final = "perf.throttled"
PERF_UNAVAILABLE: Final = "perf.unavailable"
"""Run span: one line per event (or thread) that was not counted, with the reason."""

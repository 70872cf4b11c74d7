"""Environment variables otel-ort reads; an ``instrument()`` argument wins over its variable."""

OTEL_ORT_PROFILE_SAMPLER = "OTEL_ORT_PROFILE_SAMPLER"
"""Which runs to profile: ``always``, ``never`` (the default), ``ratio:0.01``, ``rate:2/s``
(``rate:2/s,burst=5``), ``every:100`` (``every:100,skip_first=1000``), or any of them as
``parentbased_<spelling>``."""

OTEL_ORT_PROFILE_DIR = "OTEL_ORT_PROFILE_DIR"
"""Where profiled runs' Chrome-trace files are kept (created 0700)."""

OTEL_ORT_PROFILE_MAX_FILES = "OTEL_ORT_PROFILE_MAX_FILES"
"""Keep at most this many profile files in the directory; the oldest are deleted."""

OTEL_ORT_PROFILE_MAX_BYTES = "OTEL_ORT_PROFILE_MAX_BYTES"
"""Keep at most this many bytes of profile files in the directory; the oldest are deleted."""

OTEL_ORT_PROFILE_MAX_TRACE_BYTES = "OTEL_ORT_PROFILE_MAX_TRACE_BYTES"
"""At most this many bytes (as OTLP protobuf) of node and kernel spans per profiled run, by
default 4,000,000 (Grafana Tempo refuses traces over 5,000,000 bytes by default); the longest
nodes are kept, the rest summarised on the run span."""

OTEL_ORT_PROFILE_MODE = "OTEL_ORT_PROFILE_MODE"
"""``on`` (the default: selected runs are profiled) or ``off`` (runs are traced, none is
profiled)."""

OTEL_ORT_PROFILE_CONVERSION = "OTEL_ORT_PROFILE_CONVERSION"
"""Where profiles are converted: ``process`` (the default: a Python process of otel-ort's, so
that the conversion does not hold the instrumented process's GIL) or ``thread`` (the
profiler's worker thread)."""

OTEL_ORT_PERF_EVENTS = "OTEL_ORT_PERF_EVENTS"
"""perf counters on profiled runs: ``default`` (task-clock, page-faults, context-switches, and
cycles, instructions where the CPU has a PMU), ``off``, a comma-separated list such as
``task-clock,cycles=cyc,r01c2``, or the path of a ``perf_config.json``."""

OTEL_ORT_PERF_PERIOD_NS = "OTEL_ORT_PERF_PERIOD_NS"
"""Sampling period (ns of CPU time) for hardware counters; default: chosen from the measured
cost of one sample so that sampling takes about 1% of the run."""

OTEL_ORT_NATIVE = "OTEL_ORT_NATIVE"
"""``on`` (the default): a profile's conversion uses its C parts where they were built at
install; ``off``: the Python code they stand in for (the same output, more CPU)."""

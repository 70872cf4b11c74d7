"""The one build step pyproject.toml cannot say: the optional C parts of a profile's
conversion (node records, node spans' attributes and drafts, span framing, perf counter
tracks, perf's attribution; ``docs/architecture.md``).

``optional=True``: where they cannot be compiled (no C compiler, no Python headers), the
install goes on and otel-ort does the same work in Python, with the same output
(``docs/decisions.md``)."""

from setuptools import Extension, setup

_HEADERS = ["otel_ort/profiles/_json_text.h"]
_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=implicit"]

setup(
    ext_modules=[
        Extension(name, [source], depends=_HEADERS, extra_compile_args=_FLAGS, optional=True)
        for name, source in (
            ("otel_ort.profiles._ort_nodes", "otel_ort/profiles/_ort_nodes.c"),
            ("otel_ort.profiles._node_parts", "otel_ort/profiles/_node_parts.c"),
            ("otel_ort.perf._track_text", "otel_ort/perf/_track_text.c"),
            ("otel_ort.perf._node_counts", "otel_ort/perf/_node_counts.c"),
            ("otel_ort.export._span_frame", "otel_ort/export/_span_frame.c"),
        )
    ]
)

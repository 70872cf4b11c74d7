"""Checks on OTLP spans received from the examples (shared by their end-to-end tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from otel_ort import semconv
from tests.helpers.kept_files import kept_document


def clean_environment(**env: str) -> dict[str, str]:
    """This process's environment without any ``OTEL_*`` or ``ORT_SERVICE_*`` setting of the
    developer's own, with ``env`` on top."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "ORT_SERVICE_"))
    }
    return {**kept, **env}


def attributes_of(span: Any) -> dict[str, Any]:
    """A protobuf span's attributes as a dict (arrays as tuples)."""
    decoded = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            decoded[kv.key] = tuple(
                getattr(v, v.WhichOneof("value")) for v in value.array_value.values
            )
        else:
            decoded[kv.key] = getattr(value, kind)
    return decoded


def by_parent(spans: list[Any]) -> dict[bytes, list[Any]]:
    """Parent span id -> its child spans."""
    children: dict[bytes, list[Any]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    return children


def node_events(kept: Path) -> int:
    """The ``Node`` events of a kept Chrome-trace JSON file: one per node executed."""
    events = kept_document(kept)["traceEvents"]
    return sum(1 for event in events if event.get("cat") == "Node")


def check_profiled(run: Any, children: dict[bytes, list[Any]], directory: Path) -> None:
    """A profiled run span: a node span per node under it, and its Chrome JSON on disk."""
    attributes = attributes_of(run)
    assert attributes[semconv.RUN_PROFILED] is True
    nodes = children.get(run.span_id, [])
    assert len(nodes) == attributes[semconv.RUN_NODE_COUNT] > 0
    assert all(node.trace_id == run.trace_id for node in nodes)
    assert all(semconv.NODE_OP_TYPE in attributes_of(node) for node in nodes)
    kept = Path(attributes[semconv.PROFILE_FILE])
    assert kept.parent == directory and kept.is_file()
    assert kept_document(kept)["otherData"]["trace_id"] == run.trace_id.hex()

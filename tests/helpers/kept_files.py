"""Reading the files otel-ort keeps (gzip-compressed Chrome-trace JSON) in tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from otel_ort.perf.attribution import Attribution
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.tracks import counter_events
from otel_ort.profiles import chrome

KEPT_GLOB = "otel-ort_*.json.gz"
TRACE_ID = "5b8efff798038103d269b633813fc60c"
SPAN_ID = "eee19b7ec3c1b174"
START_NS = 1_795_000_000_000_000_000


def kept_document(path: str | Path) -> Any:
    """The kept file's JSON document."""
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def kept_file(
    path: Path,
    events: list[dict[str, Any]],
    thread_names: dict[int, str],
    counts: list[dict[str, float]] | None = None,
) -> Path:
    """``events`` as otel-ort keeps a profiled run: enriched, with perf counter tracks made
    by otel-ort's own writer when ``counts`` (one dict per node event, in list order) is
    given."""
    if counts is not None:
        nodes = [event for event in events if event["cat"] == "Node"]
        order = sorted(range(len(nodes)), key=lambda at: nodes[at]["ts"])
        windows = [(nodes[at]["ts"], nodes[at]["ts"] + nodes[at]["dur"]) for at in order]
        run_counts = RunCounts(
            attribution=Attribution(
                nodes=[counts[at] for at in order], threads=[{} for _ in order]
            ),
            period_ns=0,
            threads=len(thread_names),
            throttled=0,
            problems=(),
        )
        events = events + counter_events(run_counts, windows, pid=7)
    data = chrome.enrich(
        events,
        other_data={
            chrome.START_TIME_KEY: START_NS,
            "trace_id": TRACE_ID,
            "span_id": SPAN_ID,
            "session_id": "test-1",
            "model": "bert.onnx",
            "otel_ort_version": "0.1.0",
        },
        process_name="onnxruntime (pid 7)",
        thread_names=thread_names,
    )
    path.write_bytes(data)
    return path

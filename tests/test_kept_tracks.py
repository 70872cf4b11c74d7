"""The worker hands perf counter tracks to the kept file's writer apart from ORT's events (made
just before it writes, with the garbage collector paused): the file is the same bytes as
with the tracks at the end of the events."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from otel_ort.perf.attribution import Attribution, Counted, ThreadRun, attribute
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.records import ThreadRecords
from otel_ort.perf.tracks import counter_events, counters
from otel_ort.profiles import chrome, read_profile
from tests.helpers.profiles import session_level_profile


def enriched(events: list[Any], tracks: list[dict[str, Any]] | None) -> bytes:
    return chrome.enrich(
        events if tracks is None else events[: len(events) - len(tracks)],
        other_data={chrome.START_TIME_KEY: 5, "trace_id": "ab", "span_id": "cd"},
        process_name="onnxruntime (pid 7)",
        thread_names={3: "main (run)"},
        tracks=tracks or (),
    )


@pytest.mark.parametrize("pid", [None, "not an int", -1])
def test_tracks_apart_make_the_same_file_as_tracks_in_the_events(tmp_path: Path, pid: Any) -> None:
    profile = read_profile(session_level_profile(tmp_path, depth=4, runs=1))
    nodes = profile.runs[0].nodes
    windows = [(node.ts, node.end) for node in nodes]
    values = [
        {"task-clock": 1000.0 + k, "page-faults": math.nan if k % 3 else 2.0}
        for k in range(len(nodes))
    ]
    counts = RunCounts(Attribution(values, [{} for _ in nodes]), 0, 1, 0, ())
    first = profile.events[0]  # a dict, or a typed event (a file in exactly ORT's shape)
    ort_pid = first["pid"] if isinstance(first, dict) else first.pid
    track_pid = pid if pid is not None else ort_pid
    tracks = counter_events(counts, windows, track_pid)
    assert tracks
    with_tracks = enriched([*profile.events, *tracks], None)
    assert enriched([*profile.events, *tracks], tracks) == with_tracks
    assert b'"ph":"C"' in with_tracks and b'"traceEvents"' in with_tracks


def test_tracks_from_a_counted_runs_arrays_read_back_as_its_node_counts(tmp_path: Path) -> None:
    """``attribute`` keeps per-node values as arrays: the tracks made from them are those made
    node by node from its dicts, and the kept file's reader finds each node's count."""
    profile = read_profile(session_level_profile(tmp_path, depth=4, runs=1))
    nodes = profile.runs[0].nodes
    windows_us = [(node.ts, node.end) for node in nodes]
    base = 1_795_000_000_000_000_000
    windows = [(base + int(start * 1000), base + int(end * 1000)) for start, end in windows_us]
    leader, faults = 1, 2
    length = windows[-1][1] - base + 1_000
    thread = ThreadRun(  # on a CPU throughout; its faults' ring filled up: unknown per node
        3, (base, base + length), None, None, ThreadRecords(),
        {"task-clock": leader, "page-faults": faults}, frozenset({"page-faults"}), running=True,
    )  # fmt: skip
    counted = Counted({"task-clock": "time", "page-faults": "sparse"}, "task-clock")
    attribution = attribute([thread], windows, counted)
    assert attribution.columns is not None
    counts = RunCounts(attribution, 0, 1, 0, ())
    tracks = counter_events(counts, windows_us, 7)
    by_node = RunCounts(Attribution(attribution.nodes, attribution.threads), 0, 1, 0, ())
    assert tracks == counter_events(by_node, windows_us, 7)
    found = counters(tracks).for_nodes(nodes)
    assert found == [{"task-clock": (end - start) * 1000} for start, end in windows_us]

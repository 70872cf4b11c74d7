"""The worker hands perf counter tracks to the kept file's writer apart from ORT's events (made
just before it writes, with the garbage collector paused): the file is the same bytes as
with the tracks at the end of the events."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from otel_ort.perf.attribution import Attribution
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.tracks import counter_events
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
    track_pid = pid if pid is not None else next(e["pid"] for e in profile.events)
    tracks = counter_events(counts, windows, track_pid)
    assert tracks
    with_tracks = enriched([*profile.events, *tracks], None)
    assert enriched([*profile.events, *tracks], tracks) == with_tracks
    assert b'"ph":"C"' in with_tracks and b'"traceEvents"' in with_tracks

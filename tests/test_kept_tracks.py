"""The worker hands perf counter tracks to the kept file's writer apart from ORT's events, as
JSON text (written just before the file, with the garbage collector paused): the file holds
the same JSON as with the tracks' events at the end of ORT's. The text is written in C where
that part was built: the same events as the Python path's."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from otel_ort.perf.attribution import Attribution, Counted, NodeColumns, ThreadRun, attribute
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.records import ThreadRecords
from otel_ort.perf.tracks import counter_events, counter_text, counters
from otel_ort.profiles import chrome, read_profile
from tests.helpers.native import native_part
from tests.helpers.profiles import session_level_profile


def enriched(events: list[Any], tracks: list[dict[str, Any]] | None) -> bytes:
    text = None
    if tracks:
        text = chrome.EventText(tracks[0]["pid"], b",".join(map(orjson.dumps, tracks)))
    return chrome.enrich(
        events if tracks is None else events[: len(events) - len(tracks)],
        other_data={chrome.START_TIME_KEY: 5, "trace_id": "ab", "span_id": "cd"},
        process_name="onnxruntime (pid 7)",
        thread_names={3: "main (run)"},
        tracks=text,
    )


@pytest.mark.parametrize("pid", [None, -1])
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
    assert json.loads(enriched([*profile.events, *tracks], tracks)) == json.loads(with_tracks)
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


def _column_counts(values: dict[str, list[float]], nodes: int) -> RunCounts:
    """A counted run whose per-node values are arrays (as ``attribute`` leaves them)."""
    arrays = {alias: np.array(column, dtype=np.float64) for alias, column in values.items()}
    columns = NodeColumns(tuple(values), arrays, (), nodes)
    return RunCounts(Attribution(columns=columns), 0, 1, 0, ())


@pytest.mark.parametrize(
    ("values", "windows"),
    [
        ({"task-clock": [1000.0, 2.6e9, math.nan], "page-faults": [0.0, 3.0, 1.0]}, "ints"),
        ({"task-clock": [1.5, 2.5, 0.0]}, "floats"),
        ({"a": [math.nan] * 3, 'b"\u00e9': [1.0, 2.0, 3.0]}, "floats"),
        ({"task-clock": [1e30, 1.0, 2.0]}, "ints"),  # past int64: Python's path
        ({"task-clock": [1.0, 2.0, 3.0]}, "huge floats"),  # an exponent: Python's path
    ],
)
def test_counter_text_is_the_json_of_the_counter_events(values: Any, windows: str) -> None:
    by_kind: dict[str, list[tuple[float, float]]] = {
        "ints": [(10, 20), (20, 35), (40, 41)],
        "floats": [(10.5, 20.25), (20.0, 35.0), (40.125, 41.0)],
        "huge floats": [(1e16, 2e16), (3e16, 4e16), (5e16, 6e16)],
    }
    spans = by_kind[windows]
    counts = _column_counts(values, 3)
    text = counter_text(counts, spans, 7)
    assert json.loads(b"[" + text + b"]") == counter_events(counts, spans, 7)


def test_counter_text_is_written_in_c_where_it_was_built() -> None:
    track_text = native_part("otel_ort.perf._track_text")
    templates = [
        (
            b'{"name":"perf.task-clock","ph":"C","ts":',
            b',"pid":7,"tid":0,"cat":"perf","args":{"task-clock":',
        )
    ]
    text = track_text.counter_text(templates, [1, 2.5], [2, 3.0], [[1000, None]])
    event = b'{"name":"perf.task-clock","ph":"C","ts":%s,"pid":7,"tid":0,"cat":"perf","args":%s}'
    assert text == event % (b"1", b'{"task-clock":1000}') + b"," + event % (
        b"2",
        b'{"task-clock":0}',
    )
    assert track_text.counter_text(templates, [1], [2], [[2**63]]) is NotImplemented
    assert track_text.counter_text(templates, [math.inf], [2], [[1]]) is NotImplemented
    assert track_text.counter_text(templates, [1], [2], [["1"]]) is NotImplemented

"""Files in exactly ORT's shape are read by type (args kept as raw JSON text): the profile, the
node spans' encoding and the kept file must be what the general path makes of the same
events, and any other file must go the general way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from msgspec import Raw
from opentelemetry.sdk.trace import TracerProvider

from otel_ort.profiles import chrome, read_profile
from otel_ort.profiles.node_encoding import NodeEncoder
from otel_ort.profiles.ort_events import OrtEvent, RawArgs, decode_events
from otel_ort.profiles.records import NodeRecord, Profile
from otel_ort.profiles.spans import SpanBuilder
from tests.helpers.node_cases import SEQUENCES, direct, general
from tests.helpers.profiles import model_run, node_event, session_level_profile, write

ORT_FIELDS = ["cat", "pid", "tid", "dur", "ts", "ph", "name", "args"]


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_level_profile(tmp_path_factory.mktemp("profiles"), depth=2, runs=2)


def general_path(tmp_path: Path, path: Path) -> Profile:
    """The same events read by the general reader (the object form is never read by type)."""
    events = json.loads(path.read_text())
    return read_profile(write(tmp_path / "object_form.json", {"traceEvents": events}), 0)


def facts(profile: Profile) -> list[Any]:
    return [
        (run.index, run.ts, run.dur, run.tid, run.complete, [
            (n.name, n.op_type, n.provider, n.ts, n.dur, n.tid, dict(n.args), len(n.kernels))
            for n in run.nodes
        ])
        for run in profile.runs
    ]  # fmt: skip


def test_ort_files_are_read_by_type_as_the_general_reader_reads_them(
    tmp_path: Path, real_profile: Path
) -> None:
    typed = read_profile(real_profile, 0)
    assert typed.events and all(type(event) is OrtEvent for event in typed.events)
    assert all(type(n.args) is RawArgs for run in typed.runs for n in run.nodes)
    general = general_path(tmp_path, real_profile)
    assert all(isinstance(event, dict) for event in general.events)
    assert facts(typed) == facts(general)
    assert typed.problems == general.problems and typed.event_count == general.event_count


def ort_file(tmp_path: Path, events: list[dict[str, Any]]) -> bytes:
    return orjson.dumps([{key: event[key] for key in ORT_FIELDS} for event in events])


@pytest.mark.parametrize(
    "change",
    [
        "another field",
        "a field missing",
        "a bool time",
        "a lone surrogate",
        "NaN",
        "not UTF-8",
        "not UTF-8 in an arg",
        "an encoded surrogate in an arg",
        "cut short",
        "an object",
    ],
)
def test_files_not_exactly_in_ort_shape_go_the_general_way(tmp_path: Path, change: str) -> None:
    events = [
        node_event("fc1", "Gemm", 10, 5) | {"pid": 1, "tid": 2},
        model_run(0, 20) | {"pid": 1, "tid": 2},
    ]
    data = ort_file(tmp_path, events)
    assert decode_events(data) is not None
    changed = {
        "another field": data.replace(b'"cat"', b'"id":1,"cat"', 1),
        "a field missing": data.replace(b'"ph":"X",', b"", 1),
        "a bool time": data.replace(b'"dur":5', b'"dur":true', 1),
        "a lone surrogate": data.replace(b'"fc1', b'"\\ud800fc1', 1),
        "NaN": data.replace(b'"dur":5', b'"dur":NaN', 1),
        "not UTF-8": data.replace(b'"fc1', b'"\xfffc1', 1),
        "not UTF-8 in an arg": data.replace(b'"Gemm"', b'"Ge\xffmm"', 1),
        "an encoded surrogate in an arg": data.replace(b'"Gemm"', b'"Ge\xed\xa0\x80mm"', 1),
        "cut short": data[:-10],
        "an object": b'{"traceEvents":' + data + b"}",
    }[change]
    assert changed != data
    assert decode_events(changed) is None
    path = tmp_path / "changed.json"
    path.write_bytes(changed)
    profile = read_profile(path)  # the general reader's rules (tested in test_profile_reader)
    assert not any(type(event) is OrtEvent for event in profile.events)
    if "arg" in change:  # what the general reader makes of it: U+FFFD for each bad byte
        (op_type,) = [n.op_type for r in profile.runs for n in r.nodes]
        assert op_type.startswith("Ge\ufffd") and op_type.endswith("mm")
        assert op_type.encode("utf-8")  # nothing an encoder refuses


def read_as_ort_file(record: NodeRecord) -> tuple[NodeRecord, NodeRecord]:
    """``record`` as a typed read gives it (each arg's JSON text), and as the general reader
    gives it (orjson's parse of the text; the standard library's where orjson refuses it)."""
    texts = {  # an infinity as JSON writes it: a number too large for a double
        key: json.dumps(value).encode().replace(b"Infinity", b"1e400")
        for key, value in record.args.items()
    }
    plain = {}
    for key, text in texts.items():
        try:
            plain[key] = orjson.loads(text)
        except orjson.JSONDecodeError:
            plain[key] = json.loads(text)
    members = [json.dumps(key).encode() + b" : " + text for key, text in texts.items()]
    typed = RawArgs(Raw(b"{" + b",".join(members) + b"}"))
    same = (record.ts, record.dur, record.name, record.op_type, record.provider, record.tid)
    return NodeRecord(*same, typed), NodeRecord(*same, plain)


def json_args(record: NodeRecord) -> bool:
    """Whether JSON can carry the args (a typed read never holds NaN or Infinity)."""
    try:
        json.dumps(record.args, allow_nan=False)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("case", list(SEQUENCES))
def test_raw_args_encode_as_the_general_path_whatever_was_cached_before(case: str) -> None:
    encoder = NodeEncoder()
    sequence = [(*read_as_ort_file(r), extra) for r, extra in SEQUENCES[case] if json_args(r)]
    for _ in range(2):  # cold, then every raw text cached
        for typed, plain, extra in sequence:
            assert typed.args == plain.args
            assert direct(encoder, typed, extra) == general(plain, extra), (plain, extra)


@pytest.mark.parametrize(
    "args",
    [
        {"output_size": 1e400, "parameter_size": 2**70},  # what orjson refuses or rounds
        {"input_type_shape": [{"float": [1, None]}], "output_type_shape": [{"f": [1.0]}]},
        {"thread_scheduling_stats": {"main_thread": {"Run": 1e400, "Wait": "2"}}},
        {"thread_scheduling_stats": None, "mem_x": "null"},
        {  # ORT's shape: decoded by type
            "thread_scheduling_stats": {
                "main_thread": {"thread_pool_name": "p", "block_size": [1], "Run": "26", "Wait": 0},
                "sub_threads": {"1": {"num_run": 102, "core": 1}, "2": {"num_run": "0"}},
            }
        },
        {"thread_scheduling_stats": {"main_thread": {"thread_pool_name": None, "Run": 2**70}}},
        {"thread_scheduling_stats": {"main_thread": None, "sub_threads": {"1": {}}}},
        {"thread_scheduling_stats": {"sub_threads": {"1": {"num_run": 1.5}}, "main_thread": []}},
    ],
)
def test_raw_texts_only_json_holds_encode_as_their_values(args: dict[str, Any]) -> None:
    typed, plain = read_as_ort_file(NodeRecord(10, 5, "n", "Conv", "CPU", 7, args))
    encoder = NodeEncoder()
    for _ in range(2):
        assert direct(encoder, typed, None) == general(plain, None)


def test_kept_file_of_a_typed_read_is_the_general_one(tmp_path: Path, real_profile: Path) -> None:
    typed, general = read_profile(real_profile, 0), general_path(tmp_path, real_profile)
    kept = []
    for profile in (typed, general):
        data = chrome.enrich(
            profile.events,
            other_data={"trace_id": "ab" * 16, "span_id": "cd" * 8, chrome.START_TIME_KEY: 7},
            process_name="onnxruntime (pid 42)",
            thread_names={},
            tracks=chrome.EventText(
                1, b'{"name":"perf.x","ph":"C","pid":1,"tid":1,"ts":1,"args":{"x":2}}'
            ),
        )
        kept.append(json.loads(data))
    assert kept[0] == kept[1]
    runs = [e for e in kept[0]["traceEvents"] if e["name"] == "model_run"]
    assert runs and all(e["args"]["trace_id"] == "ab" * 16 for e in runs)


def test_a_kept_file_with_a_name_no_encoder_takes_falls_back(
    tmp_path: Path, real_profile: Path
) -> None:
    """A thread name holding a lone surrogate (a Python thread may be named so): the kept
    file of a typed read is written as the general path writes it."""
    typed, general = read_profile(real_profile, 0), general_path(tmp_path, real_profile)
    tid = general.runs[0].tid
    assert tid is not None
    kept = [
        json.loads(
            chrome.enrich(
                profile.events,
                other_data={"trace_id": "ab" * 16},
                process_name="onnxruntime",
                thread_names={tid: "worker-\udcff (run)"},
            )
        )
        for profile in (typed, general)
    ]
    assert kept[0] == kept[1]


def test_typed_and_general_reads_make_the_same_spans(tmp_path: Path, real_profile: Path) -> None:
    made = []
    for profile in (read_profile(real_profile, 0), general_path(tmp_path, real_profile)):
        builder = SpanBuilder(TracerProvider())
        spans = []
        for _ in range(2):  # the second time from the caches
            for run in profile.runs:
                drafts, summary = builder.node_drafts(profile, run, 1, 2)
                spans.append(
                    (
                        summary,
                        [(d.name, d.start, d.end, dict(d.attributes), d.encoded) for d in drafts],
                    )
                )
        made.append(spans)
    assert made[0] == made[1]

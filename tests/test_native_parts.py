"""The optional C parts give what the Python code they stand in for gives, byte for byte: the
node encoder's usual case (``_node_parts``) on real profiles and on fuzzed args, and the
framing of measured spans (``_span_frame``). ``test_kept_tracks`` does the same for the
counter tracks' text. Where a C part was not built (outside CI), its tests are skipped."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec import Raw
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import TraceState

from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.profiles import node_encoding, read_profile, reader
from otel_ort.profiles.node_attributes import node_attributes
from otel_ort.profiles.node_encoding import NodeEncoder
from otel_ort.profiles.ort_events import OrtEvent, RawArgs
from otel_ort.profiles.records import NodeRecord, Profile
from otel_ort.profiles.span_draft import DeferredAttributes, SpanDraft
from otel_ort.profiles.spans import SpanBuilder
from tests.helpers.native import native_part
from tests.helpers.profiles import (
    kernel_event,
    model_run,
    node_event,
    session_level_profile,
    write,
)


@pytest.fixture(autouse=True)
def _built() -> None:
    for name in ("_node_parts", "_ort_nodes"):
        native_part(f"otel_ort.profiles.{name}")
    native_part("otel_ort.export._span_frame")
    native_part("otel_ort.perf._track_text")
    native_part("otel_ort.perf._node_counts")


def records(profile: Profile) -> list[Any]:
    """Everything a read profile holds but its events."""
    return [
        profile.problems, profile.event_count,
        [(run.index, run.ts, run.dur, run.tid, run.complete, run.unmatched_kernels, [
            (n.name, n.op_type, n.provider, n.ts, n.dur, n.tid, _args(n), n.kernels)
            for n in run.nodes
        ]) for run in profile.runs],
    ]  # fmt: skip


def _args(node: NodeRecord) -> Any:
    return getattr(node.args, "raw", node.args)


def test_a_typed_reads_node_records_are_made_in_c_as_in_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[dict[str, Any]] = [model_run(0, 10_000)]
    for k in range(40):
        node = node_event(f"n{k}", ["Conv", "Add", "Gemm"][k % 3], 10 + 100 * k, 50)
        node["args"]["provider"] = ["CPUExecutionProvider", "CUDAExecutionProvider"][k % 2]
        if k % 5 == 1:
            del node["args"]["op_name"]  # "unknown"
        node["dur"] = [50, 50.5, -1, 10**16, 0][k % 5] if k % 7 == 3 else 50
        node["ts"] = 10.25 + 100 * k if k % 11 == 4 else node["ts"]
        node["ph"] = "B" if k == 9 else "X"
        node["name"] = f"n{k}_fence_before" if k == 13 else node["name"]
        node["cat"] = "Other" if k == 17 else "Node"
        events.append(node)
    events.append(kernel_event("k", "Conv", 20, 5))
    path = write(tmp_path / "mixed.json", events)
    real = session_level_profile(tmp_path, depth=6, runs=2)
    for source in (path, real):
        native = read_profile(source, 0)
        assert all(type(e) is OrtEvent for e in native.events)  # read by type: the C part's
        monkeypatch.setattr(reader, "_ort_nodes", None)
        python = read_profile(source, 0)
        monkeypatch.undo()
        assert records(native) == records(python)


def both(record: NodeRecord, extra: dict[str, Any] | None, limit: int | None = None) -> bool:
    """Encodes ``record`` with a Python encoder and a native one (each twice: cold, then from
    its caches); asserts they agree; whether the C part took it the second time."""
    python, native = NodeEncoder(native=False), NodeEncoder()
    assert native.native and not python.native
    for _ in range(2):
        expected = python.parts(record, extra, limit)
        assert native.parts(record, extra, limit) == expected, (record, extra)
    assert native._native is not None
    return native._native.parts(record, extra, limit) is not NotImplemented


def args_text(args: dict[str, bytes], space: bytes = b" ") -> Raw:
    """An args object's text as ORT writes it (a space around each colon), of raw values."""
    members = [json.dumps(k).encode() + space + b":" + space + v for k, v in args.items()]
    return Raw(b"{" + b",".join(members) + b"}")


def raw_node(args: dict[str, bytes], dur: Any = 12, tid: Any = 7, name: str = "n") -> NodeRecord:
    return NodeRecord(10, dur, name, "Conv", "CPU", tid, RawArgs(args_text(args)))


def test_a_real_models_nodes_are_encoded_in_c_as_in_python(tmp_path: Path) -> None:
    profile = read_profile(session_level_profile(tmp_path, depth=12, runs=3), 0)
    python, native = NodeEncoder(native=False), NodeEncoder()
    taken = 0
    for run in profile.runs:
        for at, node in enumerate(run.nodes):
            extra: dict[str, Any] = {
                "perf.task-clock": 1000 + at,
                "perf.thread_ids": [1, 2],
                "perf.x.by_thread": [at, -at],
            }
            if run.index > 0:  # every value cached by the first run: the C part's
                assert native._native is not None
                taken += native._native.parts(node, extra, None) is not NotImplemented
            assert native.parts(node, extra, None) == python.parts(node, extra, None)
    later = sum(len(run.nodes) for run in profile.runs[1:])
    assert later and taken == later


INT_TEXTS = [
    b"0", b"26", b"-3", b'"12"', b'"-0"', b'"007"', b"null", b'"x"', b'""', b"1.5", b"1e3",
    b'" 7"', b'"+7"', b"true", b"[]", b"9223372036854775807", b"9223372036854775808",
    b"-9223372036854775808", b'"99999999999999999999"', b'"\\u0031"',
]  # fmt: skip
EXTRAS: list[dict[str, Any] | None] = [
    None, {}, {"perf.a": 0}, {"perf.a": 5, "perf.b": 6}, {"perf.a": -5}, {"perf.a": 2**63},
    {"perf.a": 1.5}, {"perf.a": True}, {"perf.b": [1, 2], "perf.c": 3}, {"perf.b": []},
    {"perf.b": [True]}, {"perf.b": [2**64]}, {"perf.b": [-1, 0]}, {"perf.b": (1, 2)},
    {"onnxruntime.node.x": 1}, {"thread.id": 1}, {"perf.not_counted": ["cycles"]},
]  # fmt: skip


ORT_STATS = (
    b'{"main_thread": {"thread_pool_name": "session-1-intra-op", "thread_id": "1397", '
    b'"block_size": [], "core": 0, "Distribution": 0, "DistributionEnqueue": 0, "Run": 26, '
    b'"Wait": 0, "WaitRevoke": 0}, "sub_threads": {"1397968": {"num_run": 694, "core": 1}}}'
)


def _int_text(rng: random.Random) -> bytes:
    return rng.choice(INT_TEXTS)


def _stats_text(rng: random.Random) -> bytes:
    """ORT's thread statistics, changed at random: other types, nulls, repeated keys,
    escapes, spaces, numbers of every form."""
    space = rng.choice([b"", b" ", b"\n "])
    main: list[bytes] = []
    for key in rng.sample([b"thread_pool_name", b"Run", b"Wait", b"core", b"block_size"], 4):
        if key == b"thread_pool_name":
            value = rng.choice([b'"pool"', b'"p\\u00e9"', b"null", b"3", b'"' + b"x" * 1100 + b'"'])
        elif key == b"block_size":
            value = rng.choice([b"[]", b'[1, 2, {"a": "]"}]', b'{"x": [null, true]}'])
        else:
            value = _int_text(rng)
        main.append(b'"' + key + b'":' + space + value)
    if rng.random() < 0.1:
        main.append(rng.choice([b'"Run": 1', b'"Wai\\u0074": 2', b'"Wait": 5']))  # repeats
    subs: list[bytes] = []
    for k in range(rng.choice([0, 1, 2, 5])):
        fields = [b'"num_run": ' + _int_text(rng), b'"core": 1']
        rng.shuffle(fields)
        thread = str(1000 + k).encode() if rng.random() < 0.9 else b"1000"  # a repeated id
        value = b"{" + b", ".join(fields) + b"}" if rng.random() < 0.95 else b"null"
        subs.append(b'"' + thread + b'": ' + value)
    parts = []
    if rng.random() < 0.9:
        parts.append(
            b'"main_thread": ' + rng.choice([b"{" + b",".join(main) + b"}", b"null", b"[]"])
        )
    if rng.random() < 0.9:
        parts.append(
            b'"sub_threads": ' + rng.choice([b"{" + b", ".join(subs) + b"}", b"null", b"3"])
        )
    if rng.random() < 0.2:
        parts.insert(rng.randrange(len(parts) + 1), b'"other": {"main_thread": 1}')
    rng.shuffle(parts)
    text = b"{" + (b"," + space).join(parts) + b"}"
    return text if rng.random() < 0.95 else rng.choice([b"null", b"[]", b'"x"', b" " + text + b" "])


def test_thread_statistics_in_any_form_are_encoded_in_c_as_in_python() -> None:
    assert both(raw_node({"thread_scheduling_stats": ORT_STATS}), None)
    rng = random.Random(20261127)
    taken = 0
    for _ in range(3000):
        text = _stats_text(rng)
        json.loads(text)  # each is JSON, as what a file read by type holds
        taken += both(raw_node({"thread_scheduling_stats": text}), None)
    assert taken > 300  # the C part took many; the rest went to Python, with the same bytes


@pytest.mark.parametrize("text", INT_TEXTS)
def test_integer_args_are_encoded_in_c_as_in_python(text: bytes) -> None:
    both(raw_node({"output_size": text, "mem_arena": b'"9"'}), None)
    both(raw_node({"node_index": text, "graph_index": b"1"}), None)  # both: the dict path's


@pytest.mark.parametrize("dur", [0, 5, 4096, 2**70, 1.5, -0.0, 1e300, True])
@pytest.mark.parametrize("tid", [7, None, "12", True, 2**63, -1])
def test_durations_and_threads_are_encoded_in_c_as_in_python(dur: Any, tid: Any) -> None:
    both(raw_node({"output_size": b'"1"'}, dur=dur, tid=tid), None)


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("limit", [None, 3, 8, 9])
def test_extra_attributes_and_limits_are_encoded_in_c_as_in_python(
    extra: dict[str, Any] | None, limit: int | None
) -> None:
    both(raw_node({"output_size": b'"1"'}), extra, limit)


def test_what_the_c_part_takes() -> None:
    """The usual case is C's: these tests compare something."""
    assert both(raw_node({"output_size": b'"1"', "input_type_shape": b'[{"f": [1]}]'}), None)
    assert both(raw_node({"output_size": b"26"}, dur=1.5, tid=None), {"perf.b": [], "perf.c": 3})
    assert not both(raw_node({"output_size": b'"x"'}), None)  # int_of's None: Python's


def test_args_in_random_combinations_are_encoded_in_c_as_in_python() -> None:
    rng = random.Random(20261127)
    for _ in range(1000):
        keys = ["output_size", "mem_arena", "parameter_size", "node_index", "graph_index"]
        args = {key: rng.choice(INT_TEXTS) for key in rng.sample(keys, 3)}
        args[rng.choice(["op_name", "provider", "other"])] = b'"x"'
        args["input_type_shape"] = rng.choice([b'[{"float": [1, 3]}]', b"[]", b'[{"f": [1.5]}]'])
        args["thread_scheduling_stats"] = _stats_text(rng)
        both(raw_node(args), rng.choice(EXTRAS), rng.choice([None, 6, 12]))


def test_names_are_the_python_encoders_until_cached() -> None:
    python, native = NodeEncoder(native=False), NodeEncoder()
    assert native._native is not None
    for name in ["x" * 2000, "é \ud800", "n"]:
        record = raw_node({"output_size": b'"1"'}, name=name)
        assert native._native.parts(record, None, None) is NotImplemented  # not cached yet
        assert native.parts(record, None, None) == python.parts(record, None, None)
        assert native._native.parts(record, None, None) == python.parts(record, None, None)


def test_measured_spans_are_framed_in_c_as_in_python() -> None:
    encoder, python = ProtobufSpans(), ProtobufSpans()
    resource = Resource.create({"service.name": "frame"})
    drafts = []
    for trace_id, span_id, parent_id, start, end in [
        (2**128 - 1, 2**64 - 1, 1, 1, 2),
        (1, 2, 0, 0, 0),
        (5, 6, 7, 0, 9),
        (5, 6, 7, 9, 0),
        (3, 4, 5, 1_795_000_000_000_000_000, 1_795_000_000_000_001_000),
    ]:
        draft = SpanDraft(trace_id, span_id, parent_id, "n", start, end, {"a": 1}, resource, None)
        python.measure(draft)  # its parts made: the C part's case
        drafts.append(draft)
    unmeasured = SpanDraft(1, 2, 3, "u", 4, 5, {"b": "x"}, resource, None)
    stated = SpanDraft(1, 2, 3, "s", 4, 5, {}, resource, None)
    stated.trace_state = TraceState([("k", "v")])
    python.measure(stated)
    drafts += [unmeasured, stated]
    assert encoder.spans(drafts) == [python.span(draft) for draft in drafts]
    negative = SpanDraft(1, -2, 3, "x", 4, 5, {}, resource, None)
    python.measure(negative)
    with pytest.raises(OverflowError):  # as the Python framing raises
        encoder.spans([negative])


@pytest.mark.parametrize(("value", "used"), [("off", False), (" OFF ", False), ("on", True)])
def test_otel_ort_native_off_runs_the_python_code(value: str, used: bool) -> None:
    code = (
        "from otel_ort.profiles import node_encoding, reader\n"
        "from otel_ort.perf import attribution, records, report, tracks\n"
        "from otel_ort.export import otlp_encoding\n"
        "parts = [node_encoding._node_parts, reader._ort_nodes, tracks._track_text,"
        " otlp_encoding._span_frame, records._node_counts, report._node_counts,"
        " attribution._node_counts]\n"
        "print([part is not None for part in parts])\n"
    )
    env = {**os.environ, "OTEL_ORT_NATIVE": value}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([used] * 7)


def test_a_bad_otel_ort_native_is_logged_and_the_c_parts_used() -> None:
    code = "import otel_ort.profiles.node_encoding as m; print(m._node_parts is not None)"
    env = {**os.environ, "OTEL_ORT_NATIVE": "fast"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "True"
    assert "OTEL_ORT_NATIVE='fast' is neither 'on' nor 'off'" in done.stderr


class _Sequential(IdGenerator):
    """Ids 1, 2, 3...: two builders give the same ids to the same spans."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._next)

    def generate_trace_id(self) -> int:
        return next(self._next)


def _drafts(builder: SpanBuilder, profile: Profile, extras: list[Any]) -> list[Any]:
    drafts = []
    for run in profile.runs:
        for draft in builder.run_drafts(profile, run, node_extra=extras):
            drafts.append(
                (draft.name, draft.trace_id, draft.span_id, draft.parent_id, draft.start,
                 draft.end, dict(draft.attributes), draft.encoded, ProtobufSpans().span(draft))
            )  # fmt: skip
    return drafts


@pytest.mark.parametrize("limits", [{}, {"max_attributes": 9}, {"max_attribute_length": 8}])
def test_node_span_drafts_are_made_in_c_as_in_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: dict[str, int]
) -> None:
    profile = read_profile(session_level_profile(tmp_path, depth=8, runs=3), 0)
    profile.start_ns = 1_795_000_000_123_456_789
    extras: list[dict[str, Any]] = [
        {"perf.task-clock": 1000 + k, "perf.x.by_thread": [k, 1]} for k in range(24)
    ]
    resource = Resource.create({"service.name": "drafts"})

    def provider() -> TracerProvider:
        return TracerProvider(
            resource=resource, span_limits=SpanLimits(**limits), id_generator=_Sequential()
        )

    native = SpanBuilder(provider())
    monkeypatch.setattr(node_encoding, "_node_parts", None)
    python = SpanBuilder(provider())
    assert native._nodes.native and not python._nodes.native
    for _ in range(2):  # cold, then from the encoder's caches (the C part's case)
        assert _drafts(native, profile, extras) == _drafts(python, profile, extras)
    node = profile.runs[0].nodes[0]
    made = native._nodes.draft(node, extras[0], None, (profile.start_ns, 1, 2), native._kit)
    assert made is not None or limits  # without limits, these tests compared C's drafts


def test_times_the_c_part_cannot_take_go_to_python() -> None:
    encoder = NodeEncoder()
    kit = (SpanDraft, DeferredAttributes, node_attributes, Resource.get_empty(), None, 1024)
    for ts, dur in [(1.5, 2), (10, 0.25), (2**60, 1), (float("nan"), 1), (1e300, 1)]:
        record = raw_node({"output_size": b'"1"'}, dur=dur)
        record.ts = ts
        encoder.parts(record, None, None)  # cached
        try:
            expected: Any = ProtobufSpans.measure_parts(
                encoder.parts(record, None, None) or (b"", b""), 2, 7 + int(ts * 1000),
                7 + int(record.end * 1000),
            )  # fmt: skip
        except (ValueError, OverflowError):
            expected = None
        made = encoder.draft(record, None, None, (7, 1, 2), kit)
        if made is not None:
            draft, size = made
            assert (draft.start, draft.end, size) == (
                7 + int(ts * 1000),
                7 + int(record.end * 1000),
                expected,
            )
        else:
            assert ts != ts or abs(ts) > 2**53 or ts == 1e300  # NaN, huge: Python's


@pytest.mark.parametrize(
    "text",
    [
        b'{"output_size" : "1", "output_size" : "2"}',  # a name twice: the last value, first place
        b'{"output\\u005fsize" : "1", "mem_arena" : "2"}',  # an escaped name
        b'{"output_size":"1","input_type_shape":[{"float":[1,3]}]}',  # no spaces
        b'{ "output_size" : 7 , "thread_scheduling_stats" : {"sub_threads": {}} }',
        b"{}",
        b"[]",
        b'"not an object"',
        b'{"node_index" : "1", "graph_index" : "2"}',  # both: the dict path's
    ],
)
def test_args_texts_of_any_form_are_encoded_in_c_as_in_python(text: bytes) -> None:
    record = NodeRecord(10, 12, "n", "Conv", "CPU", 7, RawArgs(Raw(text)))
    both(record, None)
    both(record, {"perf.a": 1})


def test_a_node_naming_its_op_type_twice_is_read_as_the_general_reader_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = (
        b'{"cat" : "Node","pid" :1,"tid" :2,"dur" :5,"ts" :%d,"ph" : "X","name" :"n%d_kernel_time",'
        b'"args" : {"op_name" : "Conv", "provider" : "CPU", "op_name" : "Relu"}}'
    )
    run = (
        b'{"cat" : "Session","pid" :1,"tid" :2,"dur" :100,"ts" :0,"ph" : "X",'
        b'"name" :"model_run","args" : {}}'
    )
    path = tmp_path / "twice.json"
    path.write_bytes(b"[" + b",".join([run, *(event % (10 + k, k) for k in range(3))]) + b"]")
    native = read_profile(path, 0)
    assert all(type(e) is OrtEvent for e in native.events)
    monkeypatch.setattr(reader, "_ort_nodes", None)
    python = read_profile(path, 0)
    assert records(native) == records(python)
    assert [n.op_type for n in native.runs[0].nodes] == ["Relu"] * 3

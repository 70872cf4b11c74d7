"""Reading ORT profiles: real files, the shapes ORT writes elsewhere, and broken files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_ort.profiles import ProfileError, read_profile
from tests.helpers.profiles import (
    kernel_event,
    model_run,
    node_event,
    session_level_profile,
    write,
)


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_level_profile(tmp_path_factory.mktemp("profiles"))


def test_session_level_file_splits_into_runs_with_every_node(real_profile: Path) -> None:
    events = json.loads(real_profile.read_text())
    node_events = [e for e in events if e["cat"] == "Node"]
    profile = read_profile(real_profile)
    assert len(profile.runs) == 3
    assert sum(len(run.nodes) for run in profile.runs) == len(node_events) == 900
    for run in profile.runs:
        assert len(run.nodes) == 300 and run.complete
        assert all(run.ts <= node.ts and node.end <= run.end + 1 for node in run.nodes)
    assert profile.start_source == "filename"
    assert not profile.truncated and profile.problems == []


def test_trace_events_object_and_bare_array_read_alike(tmp_path: Path, real_profile: Path) -> None:
    events = json.loads(real_profile.read_text())
    wrapped = write(tmp_path / "wrapped.json", {"traceEvents": events, "displayTimeUnit": "ms"})
    assert [len(r.nodes) for r in read_profile(wrapped).runs] == [300, 300, 300]


def test_truncated_file_keeps_complete_events(tmp_path: Path, real_profile: Path) -> None:
    text = real_profile.read_text()
    cut = write(tmp_path / "cut.json", None)
    cut.write_text(text[: int(len(text) * 0.8)])  # killed mid-write
    profile = read_profile(cut)
    assert profile.truncated
    nodes = [len(run.nodes) for run in profile.runs]
    assert nodes[:2] == [300, 300] and 0 < nodes[2] < 300
    assert not profile.runs[2].complete  # its model_run event never came


def test_names_that_are_not_utf8_and_a_cut_inside_a_character_keep_the_nodes(
    tmp_path: Path,
) -> None:
    """ORT writes a node's name as the model has it (ONNX does not check UTF-8); a run killed
    mid-write may end the file inside a character."""
    events = [
        model_run(0, 100),
        node_event("RAW", "Relu", 10, 5),
        node_event("節点", "Relu", 20, 5),
    ]
    data = json.dumps(events, ensure_ascii=False).encode().replace(b"RAW", b"NA\xff\xfeQQ")
    raw = tmp_path / "raw.json"
    raw.write_bytes(data)
    assert [node.name for node in read_profile(raw).runs[0].nodes] == ["NA\ufffd\ufffdQQ", "節点"]
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: data.index("節".encode()) + 1])
    profile = read_profile(cut)
    assert profile.truncated
    assert [node.name for run in profile.runs for node in run.nodes] == ["NA\ufffd\ufffdQQ"]


def test_old_format_fence_events_are_not_nodes(tmp_path: Path) -> None:
    events = [model_run(0, 100)]
    for k, name in enumerate(["conv", "relu"]):
        events += [
            {**node_event(name, "Conv", 10 + 30 * k, 2), "name": f"{name}_fence_before"},
            node_event(name, "Conv", 12 + 30 * k, 20),
            {**node_event(name, "Conv", 32 + 30 * k, 1), "name": f"{name}_fence_after"},
        ]
    profile = read_profile(write(tmp_path / "old.json", events))
    assert [node.name for node in profile.runs[0].nodes] == ["conv", "relu"]
    assert profile.problems == ["4 fence events (old ORT) not shown as nodes"]


def test_parallel_executor_nodes_on_several_threads(tmp_path: Path) -> None:
    events = [
        model_run(0, 100),
        node_event("a", "MatMul", 5, 60, tid=11),
        node_event("b", "MatMul", 10, 40, tid=12),  # overlaps a, other thread
        node_event("c", "Add", 70, 10, tid=11),
    ]
    (run,) = read_profile(write(tmp_path / "parallel.json", events)).runs
    assert [(n.name, n.tid) for n in run.nodes] == [("a", 11), ("b", 12), ("c", 11)]


def test_overlapping_runs_of_several_threads_keep_their_own_nodes(tmp_path: Path) -> None:
    events = [  # in the order ORT writes them: a run's nodes, then its model_run
        node_event("b1", "Relu", 5, 10, tid=2),
        model_run(0, 30, tid=2),
        node_event("a1", "Relu", 25, 10, tid=1),  # inside both runs: the later-starting is b2's
        node_event("b2", "Relu", 40, 10, tid=2),
        node_event("a2", "Relu", 60, 10, tid=1),
        model_run(20, 60, tid=1),
        node_event("b3", "Relu", 85, 10, tid=2),  # b3's run was cut off: no model_run
    ]
    profile = read_profile(write(tmp_path / "threads.json", events))
    assert [(run.tid, run.complete, [n.name for n in run.nodes]) for run in profile.runs] == [
        (2, True, ["b1"]),
        (1, True, ["a1", "a2"]),
        (2, False, ["b2", "b3"]),
    ]


def test_a_cut_off_run_keeps_its_kernels_and_pool_nodes(tmp_path: Path) -> None:
    """Its nodes on the calling thread, its kernels and its pool threads' nodes are one run."""
    events = [
        node_event("a", "MatMul", 10, 5, tid=7),
        kernel_event("k0", "MatMul", 11, 3, parent_name="a_kernel_time"),
        model_run(0, 50, tid=7),
        node_event("a", "MatMul", 110, 5, tid=7),
        node_event("b", "Add", 112, 5, tid=8),  # a pool thread (parallel executor)
        kernel_event("k1", "MatMul", 111, 3, parent_name="a_kernel_time"),
    ]  # the file ends before the second run's model_run
    profile = read_profile(write(tmp_path / "cut.json", events))
    runs = [
        (run.tid, run.complete, [(n.name, [k.name for k in n.kernels]) for n in run.nodes])
        for run in profile.runs
    ]
    assert runs == [(7, True, [("a", ["k0"])]), (7, False, [("a", ["k1"]), ("b", [])])]


def test_real_concurrent_runs_each_get_every_node(tmp_path: Path) -> None:
    for attempt in range(5):  # a loaded machine may run the threads one after another
        directory = tmp_path / str(attempt)
        directory.mkdir()
        path = session_level_profile(directory, depth=30, runs=4, threads=3)
        profile = read_profile(path)
        found = [(run.tid, run.ts, run.dur, run.complete, len(run.nodes)) for run in profile.runs]
        assert len(profile.runs) == 12, found
        ends = [run.end for run in profile.runs]  # sorted by start
        if any(run.ts < max(ends[:k]) for k, run in enumerate(profile.runs) if k):
            break
    else:
        pytest.fail("no two runs overlapped in 5 profiles")
    for run in profile.runs:
        assert run.complete and len(run.nodes) == 90, found
        assert {node.tid for node in run.nodes} == {run.tid}, found


def test_gpu_kernels_link_to_nodes(tmp_path: Path) -> None:
    events = [
        model_run(0, 200),
        node_event("mm1", "MatMul", 10, 30),
        node_event("mm2", "MatMul", 50, 30),
        node_event("add", "Add", 90, 10),
        kernel_event("gemm_kernel", "MatMul", 60, 5),  # inside mm2 by op name and time
        kernel_event("late_kernel", "Add", 150, 5, parent_name="add_kernel_time"),  # explicit
        kernel_event("stray_kernel", "Softmax", 120, 5),  # no Softmax node: unmatched
    ]
    (run,) = read_profile(write(tmp_path / "gpu.json", events)).runs
    kernels = {node.name: [k.name for k in node.kernels] for node in run.nodes}
    assert kernels == {"mm1": [], "mm2": ["gemm_kernel"], "add": ["late_kernel"]}
    assert [k.name for k in run.unmatched_kernels] == ["stray_kernel"]


def test_gpu_kernels_of_a_repeated_name_link_to_their_own_node(tmp_path: Path) -> None:
    """A Loop body's node runs once per iteration under one name; a kernel starting with its
    node (or before it, by the clocks' rounding) is still its own."""
    events = [
        model_run(0, 200),
        node_event("body_add", "Add", 10, 5),
        node_event("body_add", "Add", 30, 5),
        *(kernel_event(f"add{at}", "Add", at + 1, 1, parent_name="body_add_kernel_time")
          for at in (10, 30)),
        kernel_event("early", "Add", 9, 1, parent_name="body_add_kernel_time"),
        kernel_event("same", "Add", 30, 1, parent_name="body_add_kernel_time"),
        kernel_event("late_matmul", "MatMul", 150, 1),  # no MatMul node holds it
    ]  # fmt: skip
    (run,) = read_profile(write(tmp_path / "gpu.json", events)).runs
    kernels = [(node.name, [k.name for k in node.kernels]) for node in run.nodes]
    assert kernels == [("body_add", ["add10", "early"]), ("body_add", ["add30", "same"])]
    assert [k.name for k in run.unmatched_kernels] == ["late_matmul"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty (0 bytes): ORT leaves an empty file when a profiled run fails"),
        (b"\xff\xfe garbage", "is not JSON (Expecting value at line 1, column 1)"),
        (b"this is not json", "is not JSON (Expecting value at line 1, column 1)"),
        (b'{"events": []}', 'expected an array of events or an object with a "traceEvents"'),
        (b'"a string"', "is JSON but not a trace"),
        (b'[{"cat": "Node"}, {"name": "x"}]', "holds no ORT run, node or kernel events"),
        (
            b'[{"cat": "Node", "name": "a_kernel_time", "ts": -5, "dur": 1, "ph": "X"},'
            b' {"cat": "Node", "name": "b_kernel_time", "ts": "soon", "dur": 1, "ph": "X"}]',
            "2 events skipped: 'ts' or 'dur' missing, negative, not a number or over 31 years",
        ),
    ],
)
def test_bad_files_get_a_clear_error_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ProfileError) as raised:
        read_profile(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot be read"):
        read_profile(tmp_path / "nope.json")


def test_events_with_bad_fields_are_skipped_and_counted(tmp_path: Path) -> None:
    events = [
        model_run(0, 100),
        node_event("good", "Relu", 10, 5),
        {**node_event("neg", "Relu", 20, 5), "dur": -1},
        {**node_event("nan", "Relu", 30, 5), "ts": "NaN"},
        {"cat": "Node", "ts": 40, "dur": 1, "ph": "X"},
        17,
    ]
    profile = read_profile(write(tmp_path / "mixed.json", events))
    assert [n.name for n in profile.runs[0].nodes] == ["good"]
    assert sorted(profile.problems) == [
        "1 events skipped: no 'name' or 'cat' string",
        "1 events skipped: not a JSON object",
        "2 events skipped: 'ts' or 'dur' missing, negative, not a number or over 31 years",
    ]


@pytest.mark.e2e  # about 20 s: ORT's own cap is 1,000,000 events
def test_a_file_of_a_million_events_reads_in_bounded_time(tmp_path: Path) -> None:
    events = [model_run(0, 10_000_000)] + [
        node_event(f"n{k}", "Relu", 1 + k * 10, 5) for k in range(1_000_000)
    ]
    path = write(tmp_path / "huge.json", events)
    (run,) = read_profile(path).runs
    assert len(run.nodes) == 1_000_000

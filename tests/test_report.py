"""`otel-ort report`: a profile as one self-contained HTML page.

The fast tests check the page's data against real profiles (ORT's session-level files, the
files otel-ort's profiler keeps) and synthetic ones shaped as otel-ort writes them (GPU
kernels, perf counter tracks, 10,000 nodes), the page's self-containment, and the command's
errors. The browser tests (``e2e``) open the page in headless Debian chromium.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from otel_ort import flush_profiles, profile_next_run, semconv
from otel_ort.cli import main
from otel_ort.demo_model import mlp_model
from otel_ort.perf.attribution import Attribution
from otel_ort.perf.counting import RunCounts
from otel_ort.perf.tracks import counter_events
from otel_ort.profiles import read_profile
from otel_ort.report import ReportError, build_report, render_html, write_report
from otel_ort.report.page_data import page_data
from tests.conftest import Telemetry, instrumentation
from tests.helpers import report_browser
from tests.helpers.kept_files import SPAN_ID, TRACE_ID, kept_document, kept_file
from tests.helpers.profiles import (
    kernel_event,
    loop_profile,
    model_run,
    node_event,
    session_level_profile,
    write,
)
from tests.helpers.report_browser import OpenedReport, chromium, open_report, save_screenshot

PERF_ALIASES = ("cycles", "instructions", "cache-misses")
OPS = (
    ("MatMul", "CUDAExecutionProvider", [[8, 128, 768], [768, 768]], [8, 128, 768]),
    ("Add", "CUDAExecutionProvider", [[8, 128, 768], [768]], [8, 128, 768]),
    ("LayerNormalization", "CUDAExecutionProvider", [[8, 128, 768], [768], [768]], [8, 128, 768]),
    ("Softmax", "CUDAExecutionProvider", [[8, 12, 128, 128]], [8, 12, 128, 128]),
    ("Gelu", "CUDAExecutionProvider", [[8, 128, 3072]], [8, 128, 3072]),
    ("Transpose", "CUDAExecutionProvider", [[8, 128, 12, 64]], [8, 12, 128, 64]),
    ("Mul", "CUDAExecutionProvider", [[8, 12, 128, 128], []], [8, 12, 128, 128]),
    ("Reshape", "CPUExecutionProvider", [[8, 128, 768], [4]], [8, 128, 12, 64]),
    ("Gather", "CPUExecutionProvider", [[30522, 768], [8, 128]], [8, 128, 768]),
    ("Concat", "CPUExecutionProvider", [[8, 128, 64], [8, 128, 64]], [8, 128, 128]),
    ("Cast", "CPUExecutionProvider", [[8, 128]], [8, 128]),
    ("Shape", "CPUExecutionProvider", [[8, 128, 768]], [3]),
)


# ---------------------------------------------------------------- profiles


def shapes(*dims: list[int]) -> list[dict[str, list[int]]]:
    return [{"float": list(each)} for each in dims]


def big_profile(path: Path, nodes: int = 10_000, threads: int = 4, seed: int = 7) -> Path:
    """A run of the parallel executor: ``nodes`` nodes on ``threads`` threads, twelve op
    types on two providers, a GPU kernel under every fifth CUDA node, perf counts."""
    rng = random.Random(seed)
    tids = [1000 + at for at in range(threads)]
    clock = dict.fromkeys(tids, 40)
    events: list[dict[str, Any]] = []
    counts: list[dict[str, float]] = []
    for at in range(nodes):
        tid = tids[at % threads]
        op, provider, inputs, output = OPS[rng.randrange(len(OPS))]
        dur = rng.choice((1, 2, 3, 5, 8, 13, 21, 40, 90, 250))
        ts = clock[tid]
        clock[tid] += dur + rng.randrange(1, 4)
        name = f"/encoder/layer.{at // 50}/{op}_{at}"
        events.append(
            node_event(
                name, op, ts, dur, tid=tid, provider=provider,
                input_type_shape=shapes(*inputs), output_type_shape=shapes(output),
            )
        )  # fmt: skip
        if provider.startswith("CUDA") and at % 5 == 0:
            kernel = f"void {op.lower()}_kernel<float, 128, true>(float const*, float*, int)"
            events.append(
                kernel_event(kernel, op, ts + 1, max(1, dur - 1), parent_name=f"{name}_kernel_time")
            )
        counts.append({"cycles": dur * 2900.0, "instructions": dur * 5100.0, "cache-misses": 7.0})
    events.insert(0, model_run(0, max(clock.values()) + 20))
    names = {
        tid: "MainThread (run)" if at == 0 else f"ORT thread {tid}" for at, tid in enumerate(tids)
    }
    return kept_file(path, events, names, counts)


def gpu_session_profile(path: Path) -> Path:
    """A session-level file of three runs with different node counts, GPU kernels (one that
    no node claims), ORT's own format (no otel-ort additions)."""
    events: list[dict[str, Any]] = []
    start = 0
    for run, count in enumerate((3, 5, 8)):
        events.append(model_run(start, 100 * count + 50))
        for at in range(count):
            ts = start + 10 + 100 * at
            name = f"run{run}_node{at}"
            op = ("MatMul", "Add", "Relu")[at % 3]
            events.append(
                node_event(
                    name, op, ts, 60 + at, input_type_shape=shapes([2, 16], [16, 16]),
                    output_type_shape=shapes([2, 16]),
                )
            )  # fmt: skip
            events.append(kernel_event(f"{op}_kernel", op, ts + 5, 30, parent_name=name))
        start += 100 * count + 200
    events.append(kernel_event("orphan_kernel", "Conv", 45, 3))
    return write(path, events)


@pytest.fixture(scope="module")
def session_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real session-level profile written by ORT: 3 runs of 12 nodes."""
    return session_level_profile(tmp_path_factory.mktemp("session"), depth=4, runs=3)


@pytest.fixture(scope="module")
def gpu_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gpu_session_profile(tmp_path_factory.mktemp("gpu") / "gpu.json")


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_profile(tmp_path_factory.mktemp("big") / "otel-ort_big.json")


def nested_profile(path: Path) -> Path:
    """A kept run whose Loop holds its body's nodes, one of them an If holding its branch's
    node, on the calling thread; task-clock per node (summed over the threads counted, as
    otel-ort writes it) and ORT's pool in the nodes' ``thread_scheduling_stats``."""

    def stats(*workers: str) -> dict[str, Any]:
        return {
            "main_thread": {"thread_pool_name": "session-1-intra-op", "thread_id": "1"},
            "sub_threads": {worker: {"num_run": 1, "core": 1} for worker in workers},
        }

    events = [
        model_run(0, 500),
        node_event("loop", "Loop", 10, 300, thread_scheduling_stats=stats("2")),
        node_event("body_add", "Add", 20, 50, thread_scheduling_stats=stats("2")),
        node_event("if", "If", 80, 150, thread_scheduling_stats=stats("2")),
        node_event("then_mul", "Mul", 90, 100, thread_scheduling_stats=stats("2", "3")),
        node_event("tail", "Identity", 240, 60, thread_scheduling_stats=stats("2")),
        node_event("after", "MatMul", 330, 100, thread_scheduling_stats=stats("3")),
    ]
    clock = [600e3, 100e3, 300e3, 200e3, 120e3, 200e3]  # ns: 2x the wall time (a spinning pool)
    counts = [{"task-clock": value} for value in clock]
    return kept_file(path, events, {7: "MainThread (run)"}, counts)


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run profiled by otel-ort's engine (perf counters when this machine allows them):
    the kept file and the run span's trace id."""
    directory = tmp_path_factory.mktemp("kept") / "profiles"
    telemetry = Telemetry()
    feeds = {"x": np.ones((4, 32), np.float32)}
    with instrumentation(**telemetry.providers, profile_dir=str(directory)):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(  # made while instrumented: perf counts its pool threads
            mlp_model(width=32, depth=4), options, providers=["CPUExecutionProvider"]
        )
        with profile_next_run():
            session.run(None, feeds)
        assert flush_profiles(timeout=60)
    (path,) = sorted(directory.glob("otel-ort_*.json.gz"))
    (span,) = [
        s
        for s in telemetry.spans(semconv.SPAN_RUN)
        if (s.attributes or {}).get(semconv.RUN_PROFILED)
    ]
    return path, f"{span.context.trace_id:032x}"


# ---------------------------------------------------------------- the page's data


def embedded(page: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S
    )
    assert match, "no embedded data"
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def node_names(data: dict[str, Any], run: int) -> list[str]:
    return [data["s"][node[0]] for node in data["runs"][run]["n"]]


def test_data_of_a_run_profiled_by_the_engine(kept_run: tuple[Path, str]) -> None:
    path, trace_id = kept_run
    profile = read_profile(path)
    data = embedded(render_html(profile))
    (run,) = data["runs"]
    nodes = profile.runs[0].nodes
    assert run["trace"] == trace_id and re.fullmatch(r"[0-9a-f]{16}", run["span"])
    assert node_names(data, 0) == [node.name for node in nodes]
    assert {data["s"][op]: count for op, count, _ in run["ot"]} == {
        "MatMul": 4,
        "Add": 4,
        "Relu": 4,
    }
    assert run["ot"][0][2] >= run["ot"][-1][2]  # most time first
    assert data["s"][run["n"][0][6]] == "float[4,32]"  # the first MatMul's input shape
    assert [label for label, _ in data["meta"]] == ["model", "session", "kept by otel-ort"]
    assert len(run["top"]) == len(nodes) and run["top"][0] == max(
        range(len(nodes)), key=lambda at: nodes[at].dur
    )
    assert data["th"] and data["th"][0][1].endswith("(run)")
    if data["perf"]:  # perf counted on this machine: every node has its counts
        assert len(run["c"]) == len(nodes) and all(values is not None for values in run["c"])
        assert "task-clock" in data["perf"]
        assert run["cpu"]["alias"] == "task-clock" and run["cpu"]["nodes"] == len(nodes)
        assert run["cpu"]["threads"] == [[nodes[0].tid, sum(node.dur for node in nodes)]]
    pools = [name for name, _ in run["pools"]]  # ORT numbers its sessions' pools in order
    assert not pools or (len(pools) == 1 and re.fullmatch(r"session-\d+-intra-op", pools[0]))


def test_data_of_a_session_level_file(session_file: Path) -> None:
    report = build_report(session_file, run=1)
    data = embedded(report.html)
    assert report.run == 1 and report.runs == 3 and report.nodes == 12
    assert [run["i"] for run in data["runs"]] == [0, 1, 2] and data["run"] == 1
    assert all(run["e"] and run["nn"] == 12 and run["trace"] is None for run in data["runs"])
    assert node_names(data, 0)[:3] == ["matmul_0", "add_0", "relu_0"]
    assert data["perf"] == [] and data["th"] == [] and report.notes == []
    names = data["s"]
    assert len(names) == len(set(names))  # each text once, shared by the three runs


def test_gpu_kernels_sit_under_their_nodes(gpu_file: Path) -> None:
    data = embedded(build_report(gpu_file).html)
    assert [run["nn"] for run in data["runs"]] == [3, 5, 8]
    first = data["runs"][0]
    linked = [kernel for kernel in first["k"] if kernel[0] >= 0]
    assert [data["s"][first["n"][k[0]][0]] for k in linked] == [
        "run0_node0",
        "run0_node1",
        "run0_node2",
    ]
    (orphan,) = [kernel for kernel in first["k"] if kernel[0] < 0]
    assert data["s"][orphan[1]] == "orphan_kernel" and data["s"][orphan[4]].startswith("grid 4x1x1")


def test_perf_counts_land_on_their_nodes(tmp_path: Path) -> None:
    events = [model_run(0, 500)]
    counts = []
    for at in range(4):  # node ends meet the next node's start: the tracks pair up anyway
        events.append(node_event(f"n{at}", "MatMul", 10 + 100 * at, 100, tid=7))
        counts.append({"cycles": 1000.0 * (at + 1), "instructions": 10.0 * at})
    counts[2]["cycles"] = float("nan")  # not counted: no value, not zero
    path = kept_file(tmp_path / "perf.json", events, {7: "MainThread (run)"}, counts)
    data = embedded(build_report(path).html)
    assert data["perf"] == ["cycles", "instructions"]
    assert data["runs"][0]["c"] == [[1000, 0], [2000, 10], [None, 20], [4000, 30]]
    assert data["th"] == [[7, "MainThread (run)"]]
    assert data["runs"][0]["trace"] == TRACE_ID and data["runs"][0]["span"] == SPAN_ID

    hidden = embedded(build_report(path, perf=False).html)
    assert hidden["perf"] == [] and hidden["runs"][0]["c"] == []
    timed = kept_file(tmp_path / "timed.json", events, {}, [{"task-clock": 1e4, "cycles": 1.0}] * 4)
    assert embedded(build_report(timed).html)["perfNs"] == [True, False]  # task-clock: ns


def test_perf_counts_of_nodes_sharing_a_start_or_a_microsecond_stay_their_own(
    tmp_path: Path,
) -> None:
    events = [
        model_run(0, 100),
        node_event("shape", "Shape", 10, 0, tid=7),  # ORT's whole µs: two 0 µs nodes at 10
        node_event("reshape", "Reshape", 10, 0, tid=7),
        node_event("a", "MatMul", 20, 10, tid=7),
        node_event("b", "MatMul", 29, 10, tid=7),  # starts 1 µs before a ends
    ]
    counts = [{"task-clock": value} for value in (1000.0, 5000.0, 7000.0, 9000.0)]
    path = kept_file(tmp_path / "perf.json", events, {7: "MainThread (run)"}, counts)
    assert embedded(build_report(path).html)["runs"][0]["c"] == [[1000], [5000], [7000], [9000]]
    document = json.loads(path.read_text())
    samples = sorted(  # as a viewer orders a counter track: by time, ties in file order
        [(e["ts"], e["args"]["task-clock"]) for e in document["traceEvents"] if e["ph"] == "C"],
        key=lambda sample: sample[0],
    )
    at_30 = [value for ts, value in samples if ts <= 30][-1]
    assert at_30 == 9000  # b's count while b runs, not a's 0 from a microsecond later
    names = [e for e in document["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert [(e["tid"], e["args"]["name"]) for e in names] == [(7, "MainThread (run)")]


def test_a_run_counted_per_run_only_has_no_counter_tracks() -> None:
    """Nodes that ran concurrently (the parallel executor) get no per-node counts."""
    totals_only = RunCounts(
        attribution=Attribution(nodes=[], threads=[]), period_ns=0, threads=2, throttled=0,
        problems=(),
    )  # fmt: skip
    assert counter_events(totals_only, [], pid=7) == []


def test_perf_asked_for_on_a_file_without_counters_is_a_note(session_file: Path) -> None:
    assert build_report(session_file).notes == []  # default: counters when present, no fuss
    report = build_report(session_file, perf=True)
    (note,) = report.notes
    assert note.startswith(f"perf counters were asked for, but {session_file.name} has none")
    assert embedded(report.html)["notes"] == [note]


def test_truncated_file_says_so(session_file: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(session_file.read_text()[:-300])
    report = build_report(cut)
    assert report.notes[0].startswith("the file was cut short")
    assert "is incomplete" in report.notes[0]


def test_ten_thousand_nodes_embed_compactly(big_file: Path) -> None:
    started = time.perf_counter()
    report = build_report(big_file)
    elapsed = time.perf_counter() - started
    data = embedded(report.html)
    size = len(report.html.encode())
    print(f"\n10,000-node page: {size / 1e6:.2f} MB, built in {elapsed:.2f} s")
    assert data["runs"][0]["nn"] == 10_000 and len(data["runs"][0]["k"]) > 500
    assert len(data["th"]) == 4 and len(data["perf"]) == 3
    assert size < 3_000_000


def test_runs_beyond_the_page_budget_are_listed_not_embedded(session_file: Path) -> None:
    profile = read_profile(session_file)
    page = page_data(profile, run=2, max_nodes=20)
    assert [run["e"] for run in page.data["runs"]] == [0, 0, 1]
    assert "2 of 3 runs are listed but not embedded" in page.notes[0]
    assert "--run N" in page.notes[0]


def by_name(data: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    return dict(zip(node_names(data, 0), values, strict=True))


def test_nested_windows_get_their_holder_and_depth(tmp_path: Path) -> None:
    """A Loop's (If's, Scan's) subgraph nodes run inside its window on its thread: each node
    names its innermost holder and its depth, which the timeline draws as lanes below."""
    path = nested_profile(tmp_path / "nested.json")
    data = embedded(build_report(path).html)
    run = data["runs"][0]
    names = node_names(data, 0)
    holders = {name: None if at < 0 else names[at] for name, at in by_name(data, run["h"]).items()}
    assert holders == {
        "loop": None, "body_add": "loop", "if": "loop", "then_mul": "if", "tail": "loop",
        "after": None,
    }  # fmt: skip
    assert by_name(data, run["d"]) == {
        "loop": 0, "body_add": 1, "if": 1, "then_mul": 2, "tail": 1, "after": 0,
    }  # fmt: skip

    other_thread = write(
        tmp_path / "threads.json",
        [
            model_run(0, 100),
            node_event("a", "Add", 10, 50, tid=7),
            node_event("b", "Mul", 20, 10, tid=8),
        ],
    )  # overlapping, but on two threads: neither holds the other
    flat = embedded(build_report(other_thread).html)["runs"][0]
    assert flat["h"] == [] and flat["d"] == []


def test_nesting_of_a_loop_profiled_by_ort(tmp_path: Path) -> None:
    data = embedded(build_report(loop_profile(tmp_path, trips=3)).html)
    depths = data["runs"][0]["d"]
    ops = [data["s"][node[1]] for node in data["runs"][0]["n"]]
    assert sorted(zip(ops, depths, strict=True)) == sorted(
        [("Loop", 0)] + [(op, 1) for op in ("Add", "Identity", "Identity") * 3]
    )


def test_cpu_per_thread_sums_the_outermost_nodes_and_names_the_pool(tmp_path: Path) -> None:
    """task-clock sums every thread counted during a node (the pool's spinning threads too):
    the page gets the outermost nodes' sum next to their wall time per thread that ran them,
    and the pool that helped, so it can say what the sum holds and bound each thread's part."""
    data = embedded(build_report(nested_profile(tmp_path / "nested.json")).html)
    run = data["runs"][0]
    # the Loop's 600 µs and "after"'s 200 µs: a held node's count is in its holder's already
    assert run["cpu"] == {
        "alias": "task-clock", "total": 800_000, "wall": 400, "nodes": 2, "threads": [[7, 400]],
    }  # fmt: skip
    assert run["pools"] == [["session-1-intra-op", 2]]
    without = embedded(build_report(nested_profile(tmp_path / "n2.json"), perf=False).html)
    assert without["runs"][0]["cpu"] is None
    plain = write(tmp_path / "plain.json", [model_run(0, 100), node_event("a", "Add", 10, 50)])
    assert embedded(build_report(plain).html)["runs"][0]["cpu"] is None
    assert embedded(build_report(plain).html)["runs"][0]["pools"] == []


# ---------------------------------------------------------------- the page itself

RESOURCE_ATTRIBUTE = re.compile(
    r"""\b(?:src|href|action|srcset|poster|data)\s*=\s*["']?([^"'\s>]*)""", re.I
)


def test_page_is_self_contained(kept_run: tuple[Path, str]) -> None:
    page = build_report(kept_run[0]).html
    # the policy: nothing fetched; only the page's own script (by hash) runs
    (policy,) = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert policy.startswith("default-src 'none';") and "img-src data:" in policy
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    # no reference to anything outside the page
    for url in RESOURCE_ATTRIBUTE.findall(page):
        assert url.startswith("data:"), url
    assert "http://" not in page and "https://" not in page
    assert "@import" not in page and "url(" not in page
    assert page.count("<script") == 2  # the data and the code, both inline


def test_profile_text_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    hostile = "</script><script>alert(1)</script><!--&"
    path = write(tmp_path / "x.json", [model_run(0, 100), node_event(hostile, "Op<&>", 10, 20)])
    page = build_report(path).html
    assert hostile not in page and "alert(1)</script>" not in page
    assert embedded(page)["s"][0] == "Op<&>" and hostile in embedded(page)["s"]


# ---------------------------------------------------------------- API and command


def test_write_report_to_a_file_or_a_directory(session_file: Path, tmp_path: Path) -> None:
    out = write_report(session_file, tmp_path / "r.html", top=5)
    assert out == tmp_path / "r.html" and embedded(out.read_text())["top"] == 5
    into = write_report(session_file, tmp_path)
    assert into == tmp_path / (session_file.stem + ".html") and into.is_file()
    assert not list(tmp_path.glob(".*.tmp"))


def test_command_writes_the_page(
    gpu_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(gpu_file), "-o", str(out), "--run", "2", "--top", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{out}: run 2 of 3 (8 nodes)") and captured.err == ""
    data = embedded(out.read_text())
    assert data["run"] == 2 and len(data["runs"][2]["top"]) == 4


def test_command_perf_on_a_file_without_counters_warns(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(session_file), "--perf", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("otel-ort report: note: perf counters were asked for, but")
    assert "Traceback" not in err and out.is_file()


def test_command_default_output_is_named_after_the_profile(
    session_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(session_file)]) == 0
    assert (tmp_path / (session_file.stem + ".html")).is_file()


def test_command_output_into_a_directory_named_with_a_slash_creates_it(
    session_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "reports" / "new"
    assert main(["report", str(session_file), "-o", f"{out}{os.sep}"]) == 0
    assert (out / (session_file.stem + ".html")).is_file()


def bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    only_session = write(tmp_path / "session_only.json", [model_run(0, 100)])
    two_runs = write(
        tmp_path / "two.json",
        [model_run(0, 100), node_event("n", "Add", 10, 5), model_run(200, 50)],
    )
    not_trace = tmp_path / "object.json"
    not_trace.write_text('{"a": 1}')
    not_json = tmp_path / "text.json"
    not_json.write_text("hello")
    return [
        (
            [str(tmp_path / "missing.json")],
            "missing.json: no such file: pass the path of a profile",
        ),
        ([str(not_json)], "text.json: is not JSON"),
        ([str(not_trace)], "object.json: is JSON but not a trace"),
        ([str(only_session)], "no run has node or kernel events, so there is nothing to draw"),
        ([str(two_runs), "--run", "1"], "run 1 of"),
        ([str(two_runs), "--run", "5"], "--run 5: "),
        ([str(two_runs), "-o", str(tmp_path / "no" / "r.html")], "cannot write"),
    ]


def test_command_errors_are_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a page would go by default
    for args, expected in bad_inputs(tmp_path):
        assert main(["report", *args]) == 1, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("otel-ort report: "), err
        assert expected in err, (expected, err)
        assert "Traceback" not in err
    # each names what to do
    assert main(["report", str(tmp_path / "two.json"), "--run", "1"]) == 1
    assert "pick one that has, e.g. --run 0" in capsys.readouterr().err


def test_command_rejects_a_top_below_one(session_file: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(session_file), "--top", "0"])
    assert exit_info.value.code == 2


def test_api_errors_are_report_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such file"):
        build_report(tmp_path / "missing.json")
    with pytest.raises(ReportError, match="top must be at least 1"):
        build_report(
            write(tmp_path / "x.json", [model_run(0, 9), node_event("n", "A", 1, 2)]), top=0
        )


# ---------------------------------------------------------------- in a browser


def test_missing_chromium_skips_here_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        report_browser.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        report_browser.require_chromium()


@pytest.fixture(scope="module")
def browser() -> Any:
    with chromium() as opened:
        yield opened


def check_offline(opened: OpenedReport, page: Path) -> None:
    """Only the report file itself was requested; nothing failed or was refused."""
    assert opened.requests == [page.resolve().as_uri()], opened.requests
    assert opened.errors == [], opened.errors


@pytest.mark.e2e
def test_browser_draws_an_engine_profile(
    browser: Any, kept_run: tuple[Path, str], tmp_path: Path
) -> None:
    path, trace_id = kept_run
    page = write_report(path, tmp_path / "kept.html")
    nodes = read_profile(path).runs[0].nodes
    opened = open_report(browser, page)
    check_offline(opened, page)
    assert opened.count("#timeline rect.node") == len(nodes) == 12
    assert opened.count("#ops .op-bar") == 3
    assert opened.count("#top tbody tr") == 12
    assert opened.page.inner_text("#trace-id") == trace_id
    assert opened.page.is_visible("#trace-id")
    assert opened.count("#run-pick:visible") == 0  # one run: no picker
    longest = max(range(len(nodes)), key=lambda at: nodes[at].dur)
    opened.page.hover(f'#timeline rect.node[data-i="{longest}"]')
    tip = opened.page.locator("#tooltip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert nodes[longest].name in text and nodes[longest].op_type in text
    assert "CPUExecutionProvider" in text and "float[4,32]" in text
    perf = embedded(page.read_text())["perf"]
    if perf:
        assert "perf counters" in text and perf[0] in text
        assert opened.count("#top th.perf") == len(perf)
        cells = opened.page.locator("#top tbody td.perf").all_inner_texts()
        times = cells[perf.index("task-clock") :: len(perf)]  # a time event: shown as one
        assert times and all(re.fullmatch(r"[\d.]+ (µs|ms|s)", cell) for cell in times), times
    saved = save_screenshot(opened, tmp_path, "report-engine.png")
    print(f"\nscreenshot: {saved}")
    opened.close()


@pytest.mark.e2e
def test_chromes_trace_viewer_loads_a_kept_profile(
    browser: Any, kept_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The kept file, loaded into a real Chrome-trace viewer (Chromium's DevTools Performance
    panel): every event read, thread names from the enrichment, nodes on their threads, the
    run's trace id on ``model_run``."""
    path, trace_id = kept_run
    data = kept_document(path)
    events = data["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    screenshot = tmp_path / "devtools.png"
    parsed = report_browser.open_in_devtools(browser, path, screenshot)
    print(f"\nscreenshot: {screenshot}")
    assert parsed["events"] == len(events)
    assert parsed["runArgs"] == [{"trace_id": trace_id, "span_id": data["otherData"]["span_id"]}]
    threads = {(t["pid"], t["tid"]): t for t in parsed["threads"]}
    for event in events:
        if event.get("cat") == "Node":
            thread = threads[(event["pid"], event["tid"])]
            assert event["name"] in thread["entries"]
            assert thread["name"] == names[(event["pid"], event["tid"])]


@pytest.mark.e2e
def test_browser_run_picker_and_gpu_kernels(browser: Any, gpu_file: Path, tmp_path: Path) -> None:
    page = write_report(gpu_file, tmp_path / "gpu.html", top=4)
    opened = open_report(browser, page)
    check_offline(opened, page)
    assert opened.count("#timeline rect.node") == 3
    assert opened.count("#timeline rect.kernel") == 4  # three under their nodes, one without
    assert opened.count("#top tbody tr") == 3
    assert opened.page.inner_text("#trace-id") == "none"
    assert opened.page.is_visible("#no-ids")
    for run, nodes in ((2, 8), (1, 5)):
        opened.page.select_option("#run-picker", str(run))
        opened.page.wait_for_selector(f'body[data-run="{run}"]')
        assert opened.count("#timeline rect.node") == nodes
        assert opened.count("#timeline rect.kernel") == nodes
        assert opened.count("#top tbody tr") == min(nodes, 4)
        assert opened.count("#ops .op-bar") == 3
    opened.page.hover('#timeline rect.kernel[data-k="0"]')
    assert "run1_node0" in opened.page.inner_text("#tooltip")
    save_screenshot(opened, tmp_path, "report-gpu.png")
    check_offline(opened, page)
    opened.close()


@pytest.mark.e2e
def test_browser_policy_refuses_every_fetch(
    browser: Any, session_file: Path, tmp_path: Path
) -> None:
    """The page's policy is in force: a fetch, an image and an injected script are refused."""
    page = write_report(session_file, tmp_path / "s.html")
    opened = open_report(browser, page)
    check_offline(opened, page)
    fetched = opened.page.evaluate(
        "fetch('https://example.com/x').then(() => 'fetched', () => 'refused')"
    )
    image = opened.page.evaluate(
        "new Promise(done => { const i = new Image(); i.onload = () => done('loaded');"
        " i.onerror = () => done('refused'); i.src = 'https://example.com/a.png'; })"
    )
    injected = opened.page.evaluate(
        "(() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
        " document.body.appendChild(s); return window.ran === undefined; })()"
    )
    assert (fetched, image, injected) == ("refused", "refused", True)
    assert sum("Content Security Policy" in error for error in opened.errors) >= 3
    opened.close()


@pytest.mark.e2e
def test_browser_zoom_and_table_click(browser: Any, session_file: Path, tmp_path: Path) -> None:
    page = write_report(session_file, tmp_path / "s.html")
    opened = open_report(browser, page)
    before = opened.page.get_attribute("#plot", "viewBox")
    box = opened.page.locator("#timeline").bounding_box()
    opened.page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.6)
    opened.page.mouse.wheel(0, -600)
    opened.page.wait_for_function(
        f"document.getElementById('plot').getAttribute('viewBox') !== {before!r}"
    )
    assert _view_width(opened.page.get_attribute("#plot", "viewBox")) < _view_width(before)
    opened.page.click("#top tbody tr:first-child")
    assert opened.count("#timeline rect.node.sel") == 1
    assert opened.count("#timeline rect.node") == 12
    check_offline(opened, page)
    opened.close()


def _view_width(view_box: str | None) -> float:
    assert view_box
    return float(view_box.split()[2])


@pytest.mark.e2e
def test_browser_renders_ten_thousand_nodes_in_under_3_s(
    browser: Any, big_file: Path, tmp_path: Path
) -> None:
    page = write_report(big_file, tmp_path / "big.html")
    opened = open_report(browser, page, width=1600, height=1000)
    check_offline(opened, page)
    print(f"\n10,000 nodes: rendered {opened.rendered_ms:.0f} ms after navigation start")
    assert opened.count("#timeline rect.node") == 10_000
    assert opened.count("#top tbody tr") == 20 and opened.count("#ops .op-bar") == len(OPS)
    assert opened.count("#top th.perf") == 3
    assert opened.page.inner_text("#trace-id") == TRACE_ID
    assert opened.rendered_ms < 3000
    save_screenshot(opened, tmp_path, "report-10k.png")
    opened.close()


@pytest.mark.e2e
def test_browser_top_table_fits_its_box_at_1600_px(
    browser: Any, big_file: Path, tmp_path: Path
) -> None:
    """Thread, GPU kernel and three perf columns: the node names and shapes give way (an
    ellipsis, the full text in their title) so that every column, outputs last, is inside."""
    page = write_report(big_file, tmp_path / "big.html")
    opened = open_report(browser, page, width=1600, height=1000)
    check_offline(opened, page)
    fit = opened.page.evaluate(
        """(() => {
          const box = document.querySelector('.table-wrap');
          const last = document.querySelector('#top thead th:last-child');
          return {scroll: box.scrollWidth, client: box.clientWidth, last: last.textContent,
                  right: last.getBoundingClientRect().right,
                  boxRight: box.getBoundingClientRect().right};
        })()"""
    )
    assert fit["last"] == "outputs"
    assert fit["scroll"] <= fit["client"] and fit["right"] <= fit["boxRight"], fit
    cells = opened.page.locator("#top tbody td.clip")
    assert cells.count() == 20 * 3
    for at in range(cells.count()):
        cell = cells.nth(at)
        assert cell.get_attribute("title") in (cell.inner_text(), "")
    save_screenshot(opened, tmp_path, "report-table-1600.png")
    opened.close()


@pytest.mark.e2e
def test_browser_draws_subgraph_nodes_below_their_holder_and_cpu_per_thread(
    browser: Any, tmp_path: Path
) -> None:
    page = write_report(nested_profile(tmp_path / "nested.json"), tmp_path / "nested.html")
    opened = open_report(browser, page, width=1600, height=1000)
    check_offline(opened, page)
    data = embedded(page.read_text())
    at = {name: index for index, name in enumerate(node_names(data, 0))}

    def top(name: str) -> float:
        box = opened.page.locator(f'#timeline rect.node[data-i="{at[name]}"]').bounding_box()
        assert box
        return float(box["y"])

    lane = top("body_add") - top("loop")
    assert lane > 10  # one level down, not drawn over the Loop's bar
    assert top("if") == top("tail") == top("body_add")
    assert top("then_mul") == pytest.approx(top("if") + lane)
    assert top("after") == top("loop")
    labels = opened.page.evaluate(  # each label's text after its <title>
        "Array.from(document.querySelectorAll('#timeline .lane-label'), t => t.lastChild.data)"
    )
    assert labels == ["MainThread (run) · 7", "↳ subgraph nodes", "↳ subgraph nodes · depth 2"]
    opened.page.hover(f'#timeline rect.node[data-i="{at["then_mul"]}"]')
    assert "inside" in opened.page.inner_text("#tooltip")
    assert "if (If, its subgraph) · depth 2" in opened.page.inner_text("#tooltip")

    header = opened.page.inner_text("#run-meta")
    assert "6 nodes on 1 thread (helped by 2 ORT pool threads)" in header
    cpu = opened.page.inner_text("#cpu")
    assert opened.page.is_visible("#cpu")
    assert "task-clock in the 2 outermost nodes: 800 µs, 2.0\u00d7 their 400 µs wall time" in cpu
    assert "sums the CPU time of every thread counted" in cpu
    assert "≤ 400 µs" in cpu and "≥ 400 µs" in cpu and "session-1-intra-op" in cpu
    save_screenshot(opened, tmp_path, "report-nested.png")
    opened.close()

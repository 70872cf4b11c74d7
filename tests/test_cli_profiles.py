"""`otel-ort convert` and `otel-ort summary` on real and broken profile files."""

from __future__ import annotations

import math
import os
import unicodedata
from pathlib import Path

import pytest

from otel_ort import semconv
from otel_ort.cli import main
from otel_ort.profiles import read_profile
from tests.conftest import file_spans
from tests.helpers.kept_files import SPAN_ID, TRACE_ID, kept_file
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import (
    kernel_event,
    loop_profile,
    model_run,
    node_event,
    session_level_profile,
    write,
)


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_level_profile(tmp_path_factory.mktemp("profiles"), depth=4, runs=2)


def test_convert_to_otlp_file_and_console(
    real_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "spans.jsonl"
    assert main(["convert", str(real_profile), "--output", str(output), "--console"]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), 24 nodes -> 2 trace(s) (time base from filename)" in out
    assert "├─ matmul_0" in out and "op=MatMul" in out
    spans = file_spans(output)
    assert len(spans) == 26
    assert sum(1 for span in spans if span["name"] == semconv.SPAN_RUN) == 2


@pytest.mark.parametrize("output", ["missing/spans.jsonl", "."])
def test_convert_to_a_file_it_cannot_write_is_one_clear_line(
    real_profile: Path, tmp_path: Path, output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / output
    assert main(["convert", str(real_profile), "--output", str(target)]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"otel-ort convert: cannot write {target} "
        f"({'Is a directory' if output == '.' else 'No such file or directory'}): pick a "
        "writable file with --output\n"
    )
    assert captured.out == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to fill a disk with")
def test_convert_to_a_full_disk_says_so_and_fails(
    real_profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", str(real_profile), "--output", "/dev/full"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "otel-ort convert: 26 spans could not be written to /dev/full ([Errno 28] No space "
        "left on device)\n"
    )
    assert "spans written to" not in captured.out


def test_convert_over_otlp_http(real_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OtlpReceiver() as receiver:
        code = main([
            "convert", str(real_profile), "--otlp-endpoint", receiver.http_endpoint,
            "--protocol", "http/protobuf", "--service-name", "replayed",
        ])  # fmt: skip
        received = receiver.wait_for_spans(26)
    assert code == 0 and len(received) == 26
    resource = received[0][0]
    assert {kv.key: kv.value.string_value for kv in resource.attributes}[
        "service.name"
    ] == "replayed"


def test_convert_fails_when_its_spans_do_not_arrive(
    real_profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OtlpReceiver() as receiver:
        endpoint = f"{receiver.http_endpoint}/elsewhere"  # the receiver answers 404 there
        code = main([
            "convert", str(real_profile), "--otlp-endpoint", endpoint,
            "--protocol", "http/protobuf",
        ])  # fmt: skip
    assert code == 1
    captured = capsys.readouterr()
    assert "26 failed to send, 0 dropped, or still" in captured.out
    assert f"otel-ort convert: 26 of 26 spans did not reach {endpoint}" in captured.err


def test_convert_reports_bad_files_and_goes_on(
    real_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    cut = tmp_path / "cut.json"
    cut.write_text(real_profile.read_text()[:-400])
    assert main(["convert", str(empty), str(cut), "--output", str(tmp_path / "o.jsonl")]) == 1
    out, err = capsys.readouterr()
    assert f"[1/2] {empty}: skipped: is empty (0 bytes)" in err
    assert f"[2/2] {cut}: 2 run(s)" in out and "TRUNCATED file: complete events only" in out
    assert "Traceback" not in out + err


def test_convert_says_what_max_node_spans_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [model_run(0, 100), *(node_event(f"n{k}", "Relu", 10 * k, 5 + k) for k in range(4))]
    events.append(kernel_event("k0", "Relu", 1, 1, parent_name="n0_kernel_time"))
    path = write(tmp_path / "four.json", events)
    output = tmp_path / "spans.jsonl"
    assert main(["convert", str(path), "--max-node-spans", "1", "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "3 nodes over --max-node-spans summarised on run spans" in out
    assert "1 kernels of those nodes not emitted" in out


def test_names_from_the_model_cannot_drive_the_terminal_or_break_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "evil\x1b]52;c;Y2xpcA==\x07\x1b[2J|x\ud800"  # clipboard, clear screen, a column
    path = write(tmp_path / "evil.json", [model_run(0, 100), node_event(evil, "Relu", 10, 50)])
    assert main(["summary", str(path)]) == 0
    assert main(["convert", str(path), "--console", "--output", str(tmp_path / "o.jsonl")]) == 0
    report = tmp_path / "evil.html"
    assert main(["report", str(path), "-o", str(report)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]52;c;Y2xpcA==\\x07\\x1b[2J\\|x\ufffd" in out  # the table's cell
    assert "evil\\x1b]52;c;Y2xpcA==\\x07\\x1b[2J|x\ufffd" in out  # the span tree's line
    assert report.stat().st_size > 0


def test_file_names_cannot_drive_the_terminal_or_fail_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [model_run(0, 100), node_event("ok", "Relu", 10, 50)]
    named = write(tmp_path / "run\x1b[2J.json", events)
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/bad\xff.json"))  # not UTF-8
    write(odd, events)
    assert main(["summary", str(named)]) == 0
    assert main(["convert", str(named), "--output", str(tmp_path / "o.jsonl")]) == 0
    assert main(["report", str(odd), "-o", str(tmp_path / "odd.html")]) == 0
    missing = str(tmp_path / "gone\x1b[2J.json")
    assert main(["summary", missing]) == main(["report", missing]) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "run\\x1b[2J.json: 1 run(s)" in out
    assert err.count("gone\\x1b[2J.json") == 2
    assert "odd.html: run 0 of 1 (1 nodes)" in out


def test_crafted_times_are_skipped_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        model_run(0, 100),
        node_event("ok", "Relu", 10, 5),
        node_event("far", "Relu", 10**18, 5),  # year 33714
        {**model_run(0, 100), "ts": [1], "args": {"trace_id": "ab" * 16}},
    ]
    path = write(tmp_path / "x_2026-01-01_00-00-00_000.json", events)
    assert main(["summary", str(path)]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "x.html")]) == 0
    out, err = capsys.readouterr()
    assert "1 node executions" in out and "Traceback" not in out + err
    assert main(["report", str(path), "-o", str(path)]) == 1  # not over the profile
    assert "is the profile itself: write the report elsewhere (-o)" in capsys.readouterr().err
    assert read_profile(path).runs
    far = {
        "traceEvents": [model_run(0, 100), node_event("ok", "Relu", 10, 5, output_size=math.inf)],
        "otherData": {"start_time_unix_ns": 10**21},  # year 33658
    }
    path = write(tmp_path / "far.json", far)
    assert main(["report", str(path), "-o", str(tmp_path / "far.html")]) == 0
    assert main(["convert", str(path), "--output", str(tmp_path / "far.jsonl")]) == 0
    assert "Traceback" not in "".join(capsys.readouterr())


def test_summary_tables(real_profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(real_profile), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), 24 node executions" in out
    assert "| node" in out and "| op type" in out and "| provider" in out
    assert "| MatMul  |     8 |" in out


def test_summary_columns_line_up_in_a_terminal_with_wide_and_combining_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node names in CJK (two columns each) or with combining accents (none) keep the
    table's bars one above the other."""
    names = ["全结点名", "cafe\u0301", "plain"]
    events = [model_run(0, 500)]
    events += [node_event(name, "Add", 10 + 100 * at, 50) for at, name in enumerate(names)]
    path = write(tmp_path / "wide.json", events)
    assert main(["summary", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    node_table = [line for line in lines if any(name in line for name in names)]
    assert len(node_table) == 3
    columns = {
        tuple(i for i, char in enumerate(_terminal_columns(line)) if char == "|")
        for line in node_table
    }
    assert len(columns) == 1, node_table


def _terminal_columns(line: str) -> str:
    """``line`` as a terminal lays it out: wide characters doubled, combining marks gone."""
    out = []
    for char in line:
        if unicodedata.combining(char):
            continue
        out.append(char * (2 if unicodedata.east_asian_width(char) in ("W", "F") else 1))
    return "".join(out)


def test_summary_of_a_bad_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json")
    assert main(["summary", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().startswith(f"otel-ort summary: {path}: is not JSON")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["summary", "report", "convert"])
def test_a_truncated_string_is_told_once_where_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """json says "Unterminated string starting at"; the message adds no second "at"."""
    path = tmp_path / "x.json"
    path.write_text('{"cat": "Node", "name": "tru')
    output = ["--output", str(tmp_path / "o.jsonl")] if command == "convert" else []
    assert main([command, str(path), *output]) == 1
    err = capsys.readouterr().err
    assert "is not JSON (Unterminated string starting at line 1, column 25)" in err
    assert "at at" not in err


def test_summary_of_a_kept_file_has_its_perf_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [model_run(0, 500)]
    counts = []
    for at, op in enumerate(("MatMul", "Add", "MatMul", "MatMul")):
        events.append(node_event(f"n{at}", op, 10 + 100 * at, 100, tid=7))
        counts.append({"task-clock": 1e4 * (at + 1), "cycles": 1e3 * (at + 1), "instructions": 3e3})
    counts[2]["cycles"] = math.nan  # not counted: left out of the total and of the IPC
    path = kept_file(tmp_path / "perf.json", events, {7: "MainThread (run)"}, counts)
    assert main(["summary", str(path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    per_op, top = out.split("perf counters per op type (totals over all runs; ")[1].split(
        "perf counters, top 2 nodes by task-clock"
    )
    assert "| op type | count | task-clock ms | cycles | instructions |  IPC |" in per_op
    assert "| MatMul  |     3 |         0.080 |  5,000 |        9,000 | 1.20 |" in per_op
    assert "| Add     |     1 |         0.020 |  2,000 |        3,000 | 1.50 |" in per_op
    rows = [line.split("|")[1].strip() for line in top.strip().splitlines()[2:]]
    assert rows == ["n3", "n2"]  # the most task-clock first


def test_convert_of_a_kept_file_puts_its_perf_counts_on_the_node_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        model_run(0, 300),
        node_event("a", "MatMul", 10, 100),
        node_event("b", "Add", 150, 100),
    ]
    counts = [{"task-clock": 40_000.0, "page-faults": 3.0}, {"task-clock": 20_000.0}]
    path = kept_file(tmp_path / "perf.json", events, {7: "MainThread (run)"}, counts)
    output = tmp_path / "spans.jsonl"
    assert main(["convert", str(path), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "; 1 run span(s) linked to the traced run; perf counts: task-clock, page-faults" in out
    spans = file_spans(output)
    (run,) = [span for span in spans if span["name"] == semconv.SPAN_RUN]
    assert [(link["traceId"], link["spanId"]) for link in run["links"]] == [(TRACE_ID, SPAN_ID)]
    assert run["traceId"] != TRACE_ID  # a trace of its own, next to the one it profiled
    nodes = {span["name"]: span for span in spans if span["name"] in ("a", "b")}
    values = {
        name: {a["key"]: a["value"] for a in span["attributes"] if a["key"].startswith("perf.")}
        for name, span in nodes.items()
    }
    assert values["a"]["perf.task-clock"] == {"intValue": "40000"}
    assert values["a"]["perf.page-faults"] == {"intValue": "3"}
    assert values["b"] == {"perf.task-clock": {"intValue": "20000"}}


def test_a_run_the_file_ends_in_is_said_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.json"
    path.write_text('[{"cat": "Node", "pid": 7, "tid": 7, "ts": 5, "dur": 3, "ph": "X", "name": '
                    '"n_kernel_time", "args": {"op_name": "Add"}},')  # fmt: skip
    assert main(["summary", str(path)]) == 0
    assert "(1 run(s) incomplete: the file ends before they do)" in capsys.readouterr().out
    assert main(["convert", str(path), "--output", str(tmp_path / "o.jsonl")]) == 0
    assert "1 run(s) INCOMPLETE: the file ends before they do" in capsys.readouterr().out


def test_summary_counts_a_loops_subgraph_nodes_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Loop node's window holds its body's nodes (same thread): the shares are of self time,
    so they add up to at most the run, and each node's total stays whole."""
    path = str(loop_profile(tmp_path, trips=50))
    profile = read_profile(path)
    (run,) = profile.runs
    (loop_node,) = [node for node in run.nodes if node.op_type == "Loop"]
    body = sum(node.dur for node in run.nodes if node is not loop_node)
    assert sum(node.dur for node in run.nodes) > run.dur  # the body, counted twice
    assert main(["summary", path]) == 0
    out = capsys.readouterr().out
    assert "shares are of self time" in out and "in parallel" not in out
    table = out.split("Per op type")[1].split("Per provider")[0].strip().splitlines()[2:]
    rows = {
        cells[0]: cells for cells in ([c.strip() for c in r.strip("|").split("|")] for r in table)
    }
    assert rows["Loop"][1:4] == [
        "1",
        f"{loop_node.dur / 1000:.3f}",
        f"{(loop_node.dur - body) / 1000:.3f}",
    ]
    assert sum(float(cells[-1]) for cells in rows.values()) <= 100.05
    assert rows["Add"][2] == rows["Add"][3]  # holds nothing: self = total


def test_summary_of_zero_length_runs_and_of_parallel_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    still = write(tmp_path / "still.json", [model_run(0, 0), node_event("a", "Relu", 0, 0)])
    assert main(["summary", str(still)]) == 0
    out = capsys.readouterr().out
    assert (
        "| a    | Relu    | CUDAExecutionProvider |     1 |    0.000 |     0.0 |         - |" in out
    )
    parallel = [model_run(0, 100), *(node_event(f"n{t}", "Relu", 0, 90, tid=t) for t in (1, 2))]
    assert main(["summary", str(write(tmp_path / "parallel.json", parallel))]) == 0
    out = capsys.readouterr().out
    assert "nodes ran in parallel: the shares add up to more than 100% of the runs" in out
    assert "self ms" not in out  # nodes on other threads do not hold each other

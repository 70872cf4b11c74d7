"""`otel-ort profile` on real models: tables, kept files, inputs, errors, spans over OTLP."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from otel_ort import semconv
from otel_ort.cli import main, profile_command
from otel_ort.demo_model import mlp_model
from otel_ort.perf.tracks import counters
from otel_ort.profiles import read_profile
from otel_ort.profiling.run_options import LayoutChanged, Unrecognized, run_profiling_switch
from tests.helpers.example_spans import attributes_of
from tests.helpers.kept_files import kept_document
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import model_run, node_event


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """x: float32[batch, 8]; ORT fuses each layer into one FusedGemm node: 2 nodes a run."""
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    path.write_bytes(mlp_model(width=8, depth=2))
    return path


@pytest.fixture(scope="module")
def embedding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ids: int64[batch, seq] (both symbolic) → Gather from a 10 x 4 table."""
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[table],
    )
    return saved(graph, tmp_path_factory.mktemp("models") / "embedding.onnx")


def saved(graph: Any, path: Path) -> Path:
    """``graph`` as an opset-17 model file at ``path``."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.write_bytes(model.SerializeToString())
    return path


def kept_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("otel-ort_*.json.gz"))


def node_input_shapes(path: Path) -> list[Any]:
    profile = read_profile(path)
    return [node.args["input_type_shape"] for node in profile.runs[0].nodes]


def test_default_run_prints_tables_and_keeps_one_file_per_run(
    mlp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["profile", str(mlp)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "input x: float32[1,8] random (seed 0)" in out
    assert (
        "note: input x: unknown dimension batch set to 1; choose with --shape, e.g. --shape x=8,8"
        in out
    )
    assert "1 warm-up run, 10 profiled runs" in out
    assert "open in https://ui.perfetto.dev or Chrome DevTools' Performance panel" in out
    assert f"{mlp}: 10 run(s), 20 node executions" in out
    assert "Per op type" in out and "| FusedGemm |    20 |" in out
    assert "profiled 10/10 runs" in captured.err  # not a terminal: progress as lines
    # perf's default events: the software ones count here; cycles without a PMU say why not
    counted = next(line for line in out.splitlines() if line.startswith("perf counters: "))
    assert counted.startswith("perf counters: task-clock, ")
    assert "page-faults" in counted and "context-switches" in counted
    assert "cycles" in counted or "  not counted: cycles: " in out
    assert "perf counters per op type (totals over all runs; " in out
    assert "perf counters, top 15 nodes by task-clock" in out

    directory = tmp_path / "otel-ort-profiles"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = kept_files(directory)
    assert len(files) == 10
    assert not list((directory / ".pending").iterdir())  # ORT's own files are gone
    listed = [line.split() for line in out.splitlines() if line.startswith("  run ")]
    for number, (_, run, *_, name) in enumerate(listed, start=1):  # run N is file N
        assert run == str(number) and name.endswith(f"-{number}.json.gz"), name
    for path in files:
        assert str(path) in out
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        document = kept_document(path)
        assert isinstance(document["traceEvents"], list)
        assert document["otherData"]["model"] == str(mlp)
        profile = read_profile(path)
        assert profile.start_source == "file"
        assert len(profile.runs) == 1 and len(profile.runs[0].nodes) == 2
        tracks = counters(profile.events)
        assert "task-clock" in tracks.aliases
        nodes = profile.runs[0].nodes
        for node, values in zip(nodes, tracks.for_nodes(nodes), strict=True):
            cpu_ns = (values or {})["task-clock"]  # on every CPU, ORT's pool spinning too
            assert 0 < cpu_ns <= (os.cpu_count() or 1) * (node.dur * 1000 + 50_000)


def test_many_runs_list_their_first_and_last_files_and_say_what_retention_deleted(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "p"
    arguments = ["--runs", "25", "--max-files", "5", "--profile-dir", str(directory)]
    assert main(["profile", str(mlp), *arguments]) == 0
    captured = capsys.readouterr()
    kept = {str(path) for path in kept_files(directory)}
    assert len(kept) == 5
    listed = [line.split()[-1] for line in captured.out.splitlines() if line.startswith("  run ")]
    assert len(listed) == 20 and "  ... 5 more runs" in captured.out
    assert listed[:15] == ["below)"] * 15  # "(deleted: see below)": runs 1-10, 16-20
    assert set(listed[15:]) == kept  # runs 21-25
    assert f"(20 older files deleted: {directory} keeps the newest 5, " in captured.out
    assert f"{mlp}: 25 run(s), 50 node executions" in captured.out  # the tables: every run
    assert "profiled 25/25 runs" in captured.err and "kept 25/25 runs" in captured.err


def test_perf_off_counts_nothing(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "p"
    arguments = ["--runs", "2", "--perf-events", "off", "--profile-dir", str(directory)]
    assert main(["profile", str(mlp), *arguments]) == 0
    out = capsys.readouterr().out
    assert "perf counters: off (--perf-events off, or OTEL_ORT_PERF_EVENTS=off)" in out
    assert "perf counters per op type" not in out
    for path in kept_files(directory):
        assert counters(read_profile(path).events).aliases == []


def test_a_model_without_nodes_says_so_not_empty_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = helper.make_graph(
        [],
        "no nodes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.ones(2, np.float32), "c")],
    )
    path = saved(graph, tmp_path / "constant.onnx")
    assert main(["profile", str(path), "--runs", "2", "--profile-dir", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert f"{path}: 2 run(s), 0 node executions" in out
    assert "no node events in these runs" in out
    assert "Per op type" not in out and "| node |" not in out


def test_shape_sets_symbolic_dims(
    embedding: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "p"
    code = main([
        "profile", str(embedding), "--shape", "ids=3,5", "--runs", "1",
        "--profile-dir", str(directory),
    ])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "input ids: int64[3,5] random (seed 0)" in out and "note:" not in out
    [path] = kept_files(directory)
    assert node_input_shapes(path) == [[{"float": [10, 4]}, {"int64": [3, 5]}]]


def test_input_from_npy(mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    array = tmp_path / "batch.npy"
    np.save(array, np.zeros((4, 8), np.float32))
    directory = tmp_path / "p"
    code = main([
        "profile", str(mlp), "--input", f"x={array}", "--runs", "2", "--warmup", "0",
        "--profile-dir", str(directory),
    ])  # fmt: skip
    assert code == 0
    assert "input x: float32[4,8] from --input" in capsys.readouterr().out
    for path in kept_files(directory):
        assert node_input_shapes(path)[0][0] == {"float": [4, 8]}


@pytest.fixture
def wrong_inputs(tmp_path: Path) -> Path:
    np.save(tmp_path / "doubles.npy", np.zeros((2, 8)))
    np.save(tmp_path / "wide.npy", np.zeros((2, 9), np.float32))
    with open(tmp_path / "huge.npy", "wb") as huge:  # a header only: numpy allocates first
        header = {"descr": "<f4", "fortran_order": False, "shape": (10**12, 8)}
        np.lib.format.write_array_header_1_0(huge, header)
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    return tmp_path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--shape", "x"], "--shape 'x': expected NAME=VALUE, e.g. --shape x=1,3,224,224"),
        (["--shape", "x=a,8"], "--shape x=a,8: dimensions must be whole numbers"),
        (["--shape", "y=1,8"], "--shape names input 'y', which the model does not have; its "
                               "inputs: x"),
        (["--shape", "x=1,2,3"], "--shape x=1,2,3: gives 3 dimension(s), but input 'x' has 2: "
                                 "float32[batch,8]"),
        (["--shape", "x=100000000000,8"], "input x: float32[100000000000,8] needs 2,980.2 GiB "
                                          "to draw, more than this machine has "),
        (["--shape", "x=2,9"], "input 'x' is float32[batch,8]; its fixed dimensions cannot"),
        (["--input", "x"], "--input 'x': expected NAME=VALUE"),
        (["--input", "x=DIR/doubles.npy"], "--input x: the array is float64[2,8], but input 'x' "
                                           "expects float32[batch,8]: convert it with "
                                           "array.astype(np.float32)"),
        (["--input", "x=DIR/wide.npy"], "the array is float32[2,9], but input 'x' expects "
                                        "float32[batch,8]: save an array of that shape"),
        (["--input", "x=DIR/none.npy"], "--input x=DIR/none.npy: cannot read a .npy array"),
        (["--input", "x=DIR/huge.npy"], "--input x=DIR/huge.npy: its array is larger than this "
                                        "machine's free memory"),
        (["--input", "x=DIR/garbage.onnx"], "--input x=DIR/garbage.onnx: not a .npy file; save "
                                            "the array with numpy.save"),
        (["--shape", "x=2,8", "--shape", "x=3,8"], "--shape x= is given twice (2,8 and 3,8): "
                                                    "give it once"),
        (["--input", "x=DIR/wide.npy", "--shape", "x=2,8"], "input 'x' is given by --input "
                                                             "and --shape: an --input array "
                                                             "has its own shape"),
        (["--perf-events", "DIR/none.json"], "--perf-events: cannot read perf event file "
                                             "'DIR/none.json'"),
    ],
)  # fmt: skip
def test_bad_inputs_are_one_clear_line(
    mlp: Path,
    wrong_inputs: Path,
    arguments: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arguments = [arg.replace("DIR", str(wrong_inputs)) for arg in arguments]
    directory = wrong_inputs / "p"
    assert main(["profile", str(mlp), *arguments, "--profile-dir", str(directory)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("otel-ort profile: ") and err.count("\n") == 1
    assert message.replace("DIR", str(wrong_inputs)) in err
    assert not directory.exists()


@pytest.mark.parametrize(
    ("directory", "message"),
    [
        ("", "--profile-dir: is empty: give a directory, or leave it out for the default"),
        ("DIR/open/p", "--profile-dir: directory 'DIR/open/p' is inside 'DIR/open', which anyone "
                       "can write"),
    ],
)  # fmt: skip
def test_a_profile_dir_it_must_not_use_is_one_clear_line(
    mlp: Path, tmp_path: Path, directory: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    directory = directory.replace("DIR", str(tmp_path))
    assert main(["profile", str(mlp), "--profile-dir", directory]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"otel-ort profile: {message.replace('DIR', str(tmp_path))}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("missing.onnx", "model '{path}' not found: pass the path of an .onnx file"),
        (".", "model '{path}' is a directory: pass the path of an .onnx file"),
        ("garbage.onnx", "{path}: ONNX Runtime cannot open this model: [ONNXRuntimeError]"),
    ],
)
def test_bad_models_are_one_clear_line(
    wrong_inputs: Path, model: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(wrong_inputs / model)
    assert main(["profile", path, "--profile-dir", str(wrong_inputs / "p")]) == 1
    err = capsys.readouterr().err
    assert message.format(path=path) in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["profile", "{mlp}", "--runs", "0"], "argument --runs: must be at least 1, got 0"),
        (["profile", "{mlp}", "--warmup", "x"], "argument --warmup: 'x' is not a whole number"),
        (["summary", "{mlp}", "--top", "-3"], "argument --top: must be at least 1, got -3"),
        (["convert", "{mlp}", "--max-node-spans", "-1"], "must be at least 0, got -1"),
        (["profile", "{mlp}", "--otlp-endpoint", "localhost:4317"], "is not an OTLP endpoint"),
        (["convert", "{mlp}", "--otlp-endpoint", "http://h:99999"], "give http://HOST:PORT"),
        (["demo", "--otlp-endpoint", "ftp://collector"], "'ftp://collector' is not an OTLP"),
    ],
)
def test_bad_counts_are_usage_errors_of_the_command(
    mlp: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([argument.format(mlp=mlp) for argument in arguments])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: otel-ort {arguments[0]}" in err and message in err


def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``otel-ort ... | head``: no traceback when the reader stops reading."""
    profile = tmp_path / "profile.json"
    nodes = [node_event(f"n{i}", "Add", i, 1) for i in range(20_000)]  # tables of 2 MB
    profile.write_text(json.dumps([model_run(0, 20_000), *nodes]))
    otel_ort = Path(sys.executable).with_name("otel-ort")
    command = f"{otel_ort} summary {profile} --top 20000 | head -1"
    completed = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.stdout.startswith(str(profile))
    assert "Traceback" not in completed.stderr and "BrokenPipeError" not in completed.stderr


def test_runs_sent_over_otlp_one_trace_each(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "p"
    with OtlpReceiver() as receiver:
        code = main([
            "profile", str(mlp), "--runs", "2", "--profile-dir", str(directory),
            "--otlp-endpoint", receiver.grpc_endpoint, "--service-name", "profiled",
        ])  # fmt: skip
        received = receiver.wait_for_spans(6)
    assert code == 0
    out = capsys.readouterr().out
    assert f"OTLP: 6 of 6 spans (2 traces) sent to {receiver.grpc_endpoint}; 0 failed" in out
    spans = [span for _, span in received]
    runs = {span.span_id: span for span in spans if span.name == semconv.SPAN_RUN}
    assert len(runs) == 2 and len({span.trace_id for span in runs.values()}) == 2
    nodes = [span for span in spans if span.name != semconv.SPAN_RUN]
    assert len(nodes) == 4
    for node in nodes:
        run = runs[node.parent_span_id]
        assert node.trace_id == run.trace_id
        assert run.start_time_unix_nano <= node.start_time_unix_nano
        assert attributes_of(node)["perf.task-clock"] > 0
    for run in runs.values():
        assert attributes_of(run)["perf.threads"] >= 1
    other_data = [kept_document(path)["otherData"] for path in kept_files(directory)]
    assert {bytes.fromhex(data["trace_id"]) for data in other_data} == {
        span.trace_id for span in runs.values()
    }
    service = {kv.key: kv.value.string_value for kv in received[0][0].attributes}
    assert service["service.name"] == "profiled"


def test_warm_up_runs_are_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run's CPU time (all its threads) fits in its window: not the 40 warm-up runs (about
    20 ms), nor ORT starting its profiler, nor its pool spinning between runs."""
    model = tmp_path / "wide.onnx"
    model.write_bytes(mlp_model(width=256, depth=4))
    with OtlpReceiver() as receiver:
        code = main([
            "profile", str(model), "--runs", "3", "--warmup", "40", "--shape", "x=128,256",
            "--profile-dir", str(tmp_path / "p"), "--otlp-endpoint", receiver.grpc_endpoint,
        ])  # fmt: skip
        received = receiver.wait_for_spans(3 * 5)
    assert code == 0, capsys.readouterr().err
    runs = [span for _, span in received if span.name == semconv.SPAN_RUN]
    for run in sorted(runs, key=lambda span: span.start_time_unix_nano):
        attributes = attributes_of(run)
        wall_ns = run.end_time_unix_nano - run.start_time_unix_nano
        bound = attributes["perf.threads"] * (wall_ns + 3_000_000)  # + converting the data
        assert 0 < attributes["perf.task-clock"] <= bound


def test_spans_that_do_not_arrive_fail_the_command(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OtlpReceiver() as receiver:
        endpoint = f"{receiver.http_endpoint}/elsewhere"  # the receiver answers 404 there
        code = main([
            "profile", str(mlp), "--runs", "1", "--profile-dir", str(tmp_path / "p"),
            "--otlp-endpoint", endpoint, "--protocol", "http/protobuf",
        ])  # fmt: skip
    assert code == 1
    captured = capsys.readouterr()
    assert "0 of 3 spans (1 trace) sent to" in captured.out
    assert "3 failed to send, 0 dropped, or still" in captured.out
    assert f"otel-ort profile: 3 of 3 spans did not reach {endpoint}" in captured.err
    assert len(kept_files(tmp_path / "p")) == 1


def test_a_disk_that_fills_while_keeping_still_sends_the_traces_kept(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command fails with the disk's error; the runs kept before it were sent: they
    leave before it returns, and are counted, not left to the exit."""
    from otel_ort.profiling.kept import publish_run as publish

    published: list[object] = []

    def disk_fills(*args: Any) -> None:
        if published:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        published.append(publish(*args))

    monkeypatch.setattr(profile_command, "publish_run", disk_fills)
    with OtlpReceiver() as receiver:
        code = main([
            "profile", str(mlp), "--runs", "2", "--profile-dir", str(tmp_path / "p"),
            "--otlp-endpoint", receiver.grpc_endpoint,
        ])  # fmt: skip
        received = {span.trace_id for _, span in receiver.spans()}
    out, err = capsys.readouterr()
    assert code == 1
    assert "cannot write profiles in" in err and "No space left on device" in err
    assert "sending 2 traces to" in out and len(received) == 2


def test_ctrl_c_keeps_and_shows_the_runs_done(mlp: Path, tmp_path: Path) -> None:
    """Ctrl-C during the profiled runs: the runs done are kept and tabled, ORT's raw files
    of the run in flight are removed, no traceback, exit status 130."""
    directory = tmp_path / "p"
    otel_ort = Path(sys.executable).with_name("otel-ort")
    # SIGINT as from a terminal: a background job (CI's shell) starts with it ignored
    with_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    arguments = ["profile", str(mlp), "--runs", "1000000", "--profile-dir", str(directory)]
    process = subprocess.Popen(
        [sys.executable, "-c", with_sigint, str(otel_ort), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list((directory / ".pending").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # some runs done
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=120)
    finally:  # not left running a million runs when it does not stop
        process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err and err.rstrip().endswith("otel-ort: interrupted")
    assert "interrupted: keeping the " in err
    done = int(out.split(" run(s), ")[0].rsplit(" ", 1)[1])
    assert done > 0 and len(kept_files(directory)) == min(done, 10_000)  # retention: 10,000
    assert not list((directory / ".pending").iterdir())


def test_names_from_the_model_cannot_act_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input and dimension names are the model's: an escape sequence or a bidirectional
    control in them is shown escaped, in the report and in errors."""
    name = "x\x1b]0;title\x07\u202e"
    graph = helper.make_graph(
        [helper.make_node("Neg", [name], ["y"], name="neg")],
        "named",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n\x1b[2J"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n\x1b[2J"])],
    )
    model = saved(graph, tmp_path / "named.onnx")
    directory = str(tmp_path / "p")
    assert main(["profile", str(model), "--runs", "1", "--profile-dir", directory]) == 0
    assert main(["profile", str(model), "--shape", "z=1", "--profile-dir", directory]) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err and "\u202e" not in out + err
    assert "input x\\x1b]0;title\\x07\\u202e: float32[1] random" in out
    assert "unknown dimension n\\x1b[2J set to 1" in out
    assert "its inputs: x\\x1b]0;title\\x07\\u202e" in err


def test_a_bool_scalar_and_an_initializer_given_as_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bool scalar is made up like any input; an initializer that is also a graph input
    keeps the model's value unless --input gives one."""
    weight = numpy_helper.from_array(np.full((2,), 2.0, np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
            helper.make_node("Where", ["flag", "scaled", "x"], ["y"], name="choose"),
        ],
        "flagged",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[weight],
    )
    model = saved(graph, tmp_path / "flagged.onnx")
    directory = str(tmp_path / "p")
    assert main(["profile", str(model), "--runs", "1", "--profile-dir", directory]) == 0
    out = capsys.readouterr().out
    assert "input flag: bool[] random (seed 0)" in out and "input w:" not in out
    np.save(tmp_path / "w.npy", np.ones(2, np.float32))
    arguments = ["--input", f"w={tmp_path / 'w.npy'}", "--profile-dir", directory]
    assert main(["profile", str(model), "--runs", "1", *arguments]) == 0
    assert "input w: float32[2] from --input" in capsys.readouterr().out
    assert (
        main(
            [
                "profile",
                str(model),
                "--input",
                f"v={tmp_path / 'w.npy'}",
                "--profile-dir",
                directory,
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "its inputs: flag, x; initializers it can take: w" in err
    assert main(["profile", str(model), "--shape", "w=2", "--profile-dir", directory]) == 1
    assert (
        "--shape names 'w', an initializer: the model has its value; give another with "
        "--input w=FILE.npy" in capsys.readouterr().err
    )


def test_a_run_that_fails_on_made_up_inputs_says_so_and_suggests_real_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ORT's exception from a run is one clear line; made-up inputs are named as a likely
    cause, and --input's real ones then run."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        "reshaped",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = saved(graph, tmp_path / "reshape.onnx")
    directory = tmp_path / "p"
    assert main(["profile", str(model), "--profile-dir", str(directory)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "otel-ort profile: the model failed to run on these inputs: [ONNXRuntimeError]"
    )
    assert err.endswith("give real ones with --input NAME=FILE.npy\n") and err.count("\n") == 1
    np.save(tmp_path / "shape.npy", np.array([2, 2], np.int64))
    arguments = ["--input", f"shape={tmp_path / 'shape.npy'}", "--runs", "1"]
    assert main(["profile", str(model), *arguments, "--profile-dir", str(directory)]) == 0
    assert len(kept_files(directory)) == 1


class _FailsLater:
    """An ``InferenceSession`` whose runs fail with ORT's ``Fail`` after ``runs`` of them."""

    def __init__(self, session: Any, runs: int) -> None:
        self._session = session
        self._runs = runs

    def run(self, *args: Any) -> Any:
        from onnxruntime.capi.onnxruntime_pybind11_state import Fail

        self._runs -= 1
        if self._runs < 0:
            raise Fail("[ONNXRuntimeError] : 1 : FAIL : out of luck")
        return self._session.run(*args)


def test_a_profiled_run_that_fails_leaves_no_files(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs done before are dropped with ORT's files; given inputs are not blamed."""
    opened = profile_command._open_session

    def failing(model: str, switch: Any) -> Any:
        session = opened(model, switch)  # 1 warm-up, the profiler's start, 2 profiled runs
        return dataclasses.replace(session, session=_FailsLater(session.session, 4))

    monkeypatch.setattr(profile_command, "_open_session", failing)
    np.save(tmp_path / "x.npy", np.ones((2, 8), np.float32))
    directory = tmp_path / "p"
    arguments = ["--input", f"x={tmp_path / 'x.npy'}", "--profile-dir", str(directory)]
    assert main(["profile", str(mlp), *arguments]) == 1
    err = capsys.readouterr().err
    assert "profiled 2/10 runs" in err and err.endswith(
        "\notel-ort profile: the model failed to run on these inputs: [ONNXRuntimeError] : 1 : "
        "FAIL : out of luck\n"
    )
    assert not kept_files(directory) and not list((directory / ".pending").iterdir())


def test_an_onnxruntime_whose_run_profiling_is_not_recognised_is_one_clear_line(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "onnxruntime 1.24.0: no clear byte follows only_execute_path_to_fetches"
    monkeypatch.setattr(profile_command, "run_profiling_switch", lambda: Unrecognized(reason))
    directory = tmp_path / "p"
    assert main(["profile", str(mlp), "--profile-dir", str(directory)]) == 1
    assert capsys.readouterr().err == (
        f"otel-ort profile: run-level profiling cannot be switched on in this ONNX Runtime "
        f"({reason}); it needs 1.25 or newer on 64-bit Linux: pip install -U onnxruntime\n"
    )
    assert not directory.exists()


def test_a_run_options_layout_that_changed_stops_the_runs_and_leaves_no_files(
    mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each profiled run gets a fresh RunOptions to enable; one that does not read as the
    recognised layout stops the command, the runs done dropped with their files."""
    switch = run_profiling_switch()
    assert not isinstance(switch, Unrecognized)
    enable = switch.enable
    enabled: list[Any] = []

    class Changes:
        def enable(self, options: Any, prefix: str) -> None:
            if len(enabled) == 3:  # the profiler's start, 2 profiled runs
                raise LayoutChanged("a RunOptions did not read as its recognised layout says")
            assert all(options is not other for other in enabled)  # never reused
            enabled.append(options)
            enable(options, prefix)

    monkeypatch.setattr(profile_command, "run_profiling_switch", Changes)
    directory = tmp_path / "p"
    assert main(["profile", str(mlp), "--profile-dir", str(directory)]) == 1
    err = capsys.readouterr().err
    assert "profiled 2/10 runs" in err and err.endswith(
        "\notel-ort profile: run-level profiling could not be switched on: a RunOptions did not "
        "read as its recognised layout says\n"
    )
    assert not kept_files(directory) and not list((directory / ".pending").iterdir())


def test_perf_counts_the_threads_ort_started_for_the_session(mlp: Path) -> None:
    """The profiled session's intra-op pool: threads that appeared while it was made, alive,
    none of them Python's; nodes run on the calling thread (sequential, ORT's default)."""
    switch = run_profiling_switch()
    assert not isinstance(switch, Unrecognized)
    session = profile_command._open_session(str(mlp), switch)
    python_threads = {thread.native_id for thread in threading.enumerate()}
    alive = {int(tid) for tid in os.listdir("/proc/self/task")}
    assert set(session.pool_threads) <= alive - python_threads
    assert session.sequential
    del session

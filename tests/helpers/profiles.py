"""Profile files for the tests: real ones written by ORT, and ones shaped as ORT writes them
in builds or versions this machine cannot run (GPU kernels, old fence events)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from otel_ort.demo_model import mlp_model


def session_level_profile(
    directory: Path, depth: int = 100, runs: int = 3, threads: int = 1
) -> Path:
    """A real session-level profile: an unfused MLP of ``3 * depth`` nodes, ``runs`` runs on
    each of ``threads`` threads, started together."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(directory / "session")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        mlp_model(width=16, depth=depth), options, providers=["CPUExecutionProvider"]
    )
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        for _ in range(runs):
            session.run(None, {"x": np.ones((2, 16), np.float32)})

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return Path(session.end_profiling())


def node_event(name: str, op: str, ts: int, dur: int, tid: int = 7, **args: Any) -> dict[str, Any]:
    return {
        "cat": "Node", "pid": 7, "tid": tid, "ts": ts, "dur": dur, "ph": "X",
        "name": f"{name}_kernel_time",
        "args": {"op_name": op, "provider": "CUDAExecutionProvider", "node_index": "1", **args},
    }  # fmt: skip


def model_run(ts: int, dur: int, tid: int = 7) -> dict[str, Any]:
    return {"cat": "Session", "pid": 7, "tid": tid, "ts": ts, "dur": dur, "ph": "X",
            "name": "model_run", "args": {}}  # fmt: skip


def kernel_event(name: str, op: str, ts: int, dur: int, **args: Any) -> dict[str, Any]:
    return {
        "cat": "Kernel", "pid": -1, "tid": -1, "ts": ts, "dur": dur, "ph": "X", "name": name,
        "args": {"op_name": op, "stream": "7", "grid_x": "4", "grid_y": "1", "grid_z": "1",
                 "block_x": "256", "block_y": "1", "block_z": "1", **args},
    }  # fmt: skip


def write(path: Path, events: Any) -> Path:
    path.write_text(json.dumps(events))
    return path


def loop_model() -> bytes:
    """``Loop`` over ``trips`` iterations: running sum of ``x`` and every partial sum."""

    def tensor(name: str, element: int, shape: list[int | str]) -> Any:
        return helper.make_tensor_value_info(name, element, shape)

    float3, flag = TensorProto.FLOAT, TensorProto.BOOL
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["partial"]),
        ],
        "body",
        [tensor("i", TensorProto.INT64, []), tensor("cond_in", flag, []),
         tensor("acc_in", float3, [3])],
        [tensor("cond_out", flag, []), tensor("acc_out", float3, [3]),
         tensor("partial", float3, [3])],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "start"], ["total", "partials"], body=body)],
        "loop",
        [tensor("trips", TensorProto.INT64, []), tensor("start", float3, [3]),
         tensor("x", float3, [3])],
        [tensor("total", float3, [3]), tensor("partials", float3, ["k", 3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    data: bytes = model.SerializeToString()
    return data


def loop_profile(directory: Path, trips: int) -> Path:
    """A session-level profile of one run of ``loop_model`` (``trips`` iterations):
    the Loop node's window holds its body's nodes."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(directory / "loop")
    session = ort.InferenceSession(loop_model(), options, providers=["CPUExecutionProvider"])
    ones = np.ones(3, np.float32)
    session.run(None, {"trips": np.array(trips, np.int64), "start": ones, "x": ones})
    return Path(session.end_profiling())

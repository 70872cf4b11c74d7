"""Inputs built from a model's signature for `otel-ort profile`: types, dimensions shared by
name, inputs without a shape (read from real models' encodings), and what is refused."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from otel_ort.cli import main
from otel_ort.cli.free_memory import _cgroup_headrooms, available_bytes
from otel_ort.cli.model_inputs import (
    InputError,
    InputSpec,
    _drawn_bytes,
    _random,
    build_feeds,
    load_array,
    read_inputs,
    unshaped_inputs,
)


def add_model(path: Path, *inputs: tuple[str, list[str | int] | None]) -> Path:
    """``y = Sum(inputs)`` over float tensors, each given dims (``None``: no shape at all)."""
    graph = helper.make_graph(
        [helper.make_node("Sum", [name for name, _ in inputs], ["y"], name="sum")],
        "add",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.write_bytes(model.SerializeToString())
    return path


def test_random_inputs_of_every_kind() -> None:
    specs = [
        InputSpec("f", "tensor(float16)", (2, 3)),
        InputSpec("i", "tensor(int32)", ("n",)),
        InputSpec("b", "tensor(bool)", (4,)),
        InputSpec("s", "tensor(string)", (None, 2)),
    ]
    feeds, lines = build_feeds(specs, {"i": (50,)}, {})
    assert feeds["f"].dtype == np.float16 and feeds["f"].shape == (2, 3)
    assert feeds["i"].dtype == np.int32 and 0 <= feeds["i"].min() <= feeds["i"].max() <= 9
    assert feeds["b"].dtype == np.bool_
    assert feeds["s"].shape == (1, 2) and all(isinstance(word, str) for word in feeds["s"].flat)
    assert (
        "note: input s: unknown dimension ? set to 1; choose with --shape, e.g. --shape s=8,2"
        in lines
    )


def test_a_dimension_name_takes_the_size_given_on_any_input() -> None:
    """NLP models: input_ids, attention_mask, token_type_ids all [batch, seq]."""
    specs = [
        InputSpec("ids", "tensor(int64)", ("batch", "seq")),
        InputSpec("mask", "tensor(int64)", ("batch", "seq")),
        InputSpec("types", "tensor(int64)", ("batch", "seq", None)),
    ]
    feeds, lines = build_feeds(specs, {"mask": (2, 7)}, {})
    assert [feeds[name].shape for name in ("ids", "mask", "types")] == [(2, 7), (2, 7), (2, 7, 1)]
    assert not any(line.startswith("note: input ids") for line in lines)
    assert "note: input types: unknown dimension ? set to 1" in "\n".join(lines)
    feeds, _ = build_feeds(specs, {}, {"ids": np.zeros((3, 5), np.int64)})
    assert feeds["mask"].shape == (3, 5)


def test_inputs_that_disagree_on_a_dimension_name_are_refused() -> None:
    specs = [InputSpec("a", "tensor(float)", ("n", 3)), InputSpec("b", "tensor(float)", ("n",))]
    with pytest.raises(InputError) as error:
        build_feeds(specs, {"b": (2,)}, {"a": np.zeros((4, 3), np.float32)})
    assert str(error.value) == (
        "--shape b makes dimension 'n' 2, but --input a made it 4: inputs that share a "
        "dimension name share its size"
    )


def test_placeholder_dimension_names_are_not_shared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exporters name every unknown dimension ``?`` (or ``-1``, or nothing): each is its own."""
    path = add_model(tmp_path / "m.onnx", ("x", [-1, 3, "?", "?"]))
    specs = read_inputs(str(path))
    assert specs[0].dims == (None, 3, "?", "?")
    feeds, _ = build_feeds(specs, {"x": (1, 3, 48, 192)}, {})
    assert feeds["x"].shape == (1, 3, 48, 192)
    feeds, _ = build_feeds(specs, {}, {"x": np.zeros((1, 3, 48, 192), np.float32)})
    assert feeds["x"].shape == (1, 3, 48, 192)
    code = main([
        "profile", str(path), "--shape", "x=1,3,48,192", "--runs", "1", "--warmup", "0",
        "--profile-dir", str(tmp_path / "p"), "--perf-events", "off",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "input x: float32[1,3,48,192] random (seed 0)" in out
    # nor across inputs: one given "?" leaves another's "?" unknown; "-1", "" alike
    specs = [
        InputSpec("a", "tensor(float)", ("?", "-1", "", " ? ")),
        InputSpec("b", "tensor(float)", ("?", "-1")),
    ]
    feeds, lines = build_feeds(specs, {"a": (2, 3, 4, 5)}, {})
    assert feeds["a"].shape == (2, 3, 4, 5) and feeds["b"].shape == (1, 1)
    assert "note: input b: unknown dimensions ?, -1 set to 1" in "\n".join(lines)


def test_a_real_dimension_name_is_still_shared_within_an_input(tmp_path: Path) -> None:
    path = add_model(tmp_path / "m.onnx", ("x", ["n", "n"]), ("z", ["n", "n"]))
    specs = read_inputs(str(path))
    with pytest.raises(InputError, match="makes dimension 'n' 3, but --shape x made it 2"):
        build_feeds(specs, {"x": (2, 3)}, {})
    with pytest.raises(InputError, match="--shape z makes dimension 'n' 4, but --input x made"):
        build_feeds(specs, {"z": (4, 4)}, {"x": np.zeros((2, 2), np.float32)})
    feeds, _ = build_feeds(specs, {"x": (2, 2)}, {})
    assert feeds["z"].shape == (2, 2)


def test_inputs_without_a_shape_are_found_in_the_model(tmp_path: Path) -> None:
    path = add_model(tmp_path / "m.onnx", ("x", None), ("s", []), ("v", ["n", 3]))
    assert unshaped_inputs(str(path)) == {"x"}
    specs = {spec.name: spec for spec in read_inputs(str(path))}
    assert specs["x"].dims is None and specs["s"].dims == () and specs["v"].dims == ("n", 3)


def test_an_input_without_a_shape_takes_any_dimensions() -> None:
    specs = [InputSpec("x", "tensor(float)", None), InputSpec("s", "tensor(float)", ())]
    feeds, lines = build_feeds(specs, {}, {})
    assert feeds["x"].shape == () and (
        "note: input x: the model gives it no shape; made a scalar; choose with --shape "
        "x=D0,D1,..." in lines
    )
    feeds, lines = build_feeds(specs, {"x": (2, 3, 4)}, {})
    assert feeds["x"].shape == (2, 3, 4) and not any(line.startswith("note") for line in lines)
    feeds, _ = build_feeds(specs, {}, {"x": np.ones((5,), np.float32)})
    assert feeds["x"].shape == (5,)
    with pytest.raises(InputError, match=r"input 's' has 0: float32\[\]"):
        build_feeds(specs, {"s": (2,)}, {})
    with pytest.raises(InputError, match="expects float32 of any shape: convert it"):
        build_feeds(specs, {}, {"x": np.ones((5,), np.float64)})


def test_a_model_input_without_a_shape_is_profiled_at_the_shape_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = add_model(tmp_path / "m.onnx", ("x", None), ("v", [3]))
    code = main([
        "profile", str(path), "--shape", "x=2,3", "--runs", "1", "--warmup", "0",
        "--profile-dir", str(tmp_path / "p"), "--perf-events", "off",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "input x: float32[2,3] random (seed 0)" in out


def test_inputs_bigger_than_free_memory_are_refused_before_numpy_allocates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where Linux overcommits, numpy gets any allocation and the machine thrashes filling it:
    the free memory Linux reports (here said to be 4 MiB) is checked first."""
    monkeypatch.setattr("otel_ort.cli.model_inputs.available_bytes", lambda: 4 * 2**20)
    feeds, _ = build_feeds([InputSpec("x", "tensor(float)", (1000, 1000))], {}, {})
    assert feeds["x"].nbytes == 4_000_000  # float32 is drawn in place: 4 bytes an element
    with pytest.raises(InputError) as refused:  # int8 is drawn in int64, then copied
        build_feeds([InputSpec("x", "tensor(int8)", (1000, 1000))], {}, {})
    assert str(refused.value) == (
        "input x: int8[1000,1000] needs 8.6 MiB to draw, more than this machine has 4.0 MiB "
        "free: choose smaller dimensions with --shape x=..."
    )
    np.save(tmp_path / "big.npy", np.zeros((2000, 1000), np.float32))
    with pytest.raises(InputError, match=r"free memory \(7.6 MiB; 4.0 MiB free\)"):
        load_array("x", str(tmp_path / "big.npy"))


@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "float64", "int64", "int32", "int8", "bool", "object"]
)
def test_the_memory_checked_is_what_drawing_takes(dtype: str) -> None:
    elements = 200_000
    tracemalloc.start()
    try:
        _random(np.random.default_rng(0), np.dtype(dtype), (elements,))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.9 < peak / (elements * _drawn_bytes(np.dtype(dtype))) < 1.1


@pytest.mark.parametrize(
    ("membership", "files", "headroom"),
    [
        ("0::/pod\n", {"pod/memory.max": "max\n", "pod/memory.current": "10\n"}, None),
        (
            "0::/pod\n",
            {"pod/memory.max": "1000\n", "pod/memory.current": "600\n",
             "pod/memory.stat": "anon 400\ninactive_file 150\n"},
            550,
        ),
        (
            "4:memory:/job\n1:cpu:/job\n0::/\n",
            {"memory/job/memory.limit_in_bytes": "1000\n",
             "memory/job/memory.usage_in_bytes": "900",
             "memory/job/memory.stat": "cache 300\ntotal_inactive_file 200\n"},
            300,
        ),
        (
            "4:memory:/\n",
            {"memory/memory.limit_in_bytes": "9223372036854771712\n",
             "memory/memory.usage_in_bytes": "900\n"},
            None,
        ),
    ],
    ids=["v2-no-limit", "v2", "v1-hybrid", "v1-no-limit"],
)  # fmt: skip
def test_a_memory_cgroups_limit_bounds_the_free_memory(
    tmp_path: Path, membership: str, files: dict[str, str], headroom: int | None
) -> None:
    """A container sees the host's /proc/meminfo: its cgroup's limit, less what it uses but
    page cache the kernel can drop, is what it can still fill."""
    (tmp_path / "cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    found = _cgroup_headrooms(tmp_path / "cgroup", tmp_path / "fs")
    assert found == ([] if headroom is None else [headroom])


def test_free_memory_here_is_what_linux_reports() -> None:
    meminfo = Path("/proc/meminfo").read_text()
    total = int(meminfo.split("MemTotal:")[1].split()[0]) * 1024
    free = available_bytes()
    assert free is not None and 0 < free <= total

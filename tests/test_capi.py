"""The cffi C API binding against real ORT: outputs bitwise equal to InferenceSession.run."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T

from otel_ort.capi import (
    CApi,
    CSession,
    OrtError,
    SessionConfig,
    Termination,
    UnsupportedOutput,
    UnsupportedValue,
    load_api,
)
from otel_ort.capi.library import ffi, first_api_version
from otel_ort.capi.values import ValueCodec
from otel_ort.demo_model import mlp_model
from tests import capi_models
from tests.conftest import held_runs, run_threads
from tests.perf_models import matmul_chain

RNG = np.random.default_rng(7)


def assert_same(ours: Any, theirs: Any) -> None:
    """Equal values, bit for bit, of the same Python and numpy types."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, list):
        assert len(ours) == len(theirs)
        for mine, other in zip(ours, theirs, strict=True):
            assert_same(mine, other)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for mine, other in zip(ours.values(), theirs.values(), strict=True):
            assert_same(mine, other)
    elif isinstance(theirs, np.ndarray):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape)
        if theirs.dtype == object:
            assert [type(x) for x in ours.flat] == [type(x) for x in theirs.flat]
            assert ours.tolist() == theirs.tolist()
        else:
            assert ours.tobytes() == theirs.tobytes()
    elif isinstance(theirs, float):
        assert np.float64(ours).tobytes() == np.float64(theirs).tobytes()
    else:
        assert ours == theirs


def twin_runs(model: bytes, feeds: dict[str, Any], **config: Any) -> tuple[list[Any], list[Any]]:
    """The outputs of CSession.run and of InferenceSession.run on the same model and feeds."""
    with CSession(SessionConfig(model, **config)) as session:
        ours = session.run(feeds)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, theirs


def check_twin(model: bytes, feeds: dict[str, Any]) -> list[Any]:
    ours, theirs = twin_runs(model, feeds)
    assert_same(ours, theirs)
    return ours


@pytest.fixture(scope="module")
def api() -> CApi:
    return load_api()


@pytest.fixture(scope="module")
def mlp() -> bytes:
    return mlp_model(width=32, depth=2)


@pytest.fixture(scope="module")
def mlp_session(mlp: bytes) -> Any:
    with CSession(SessionConfig(mlp)) as session:
        yield session


# --- loading -------------------------------------------------------------------------------


def test_load_api_finds_the_wheel_library(api: CApi) -> None:
    assert Path(api.library_path).name.startswith("libonnxruntime.so")
    assert Path(api.library_path).parent == Path(ort.__file__).parent / "capi"
    assert api.ort_version == ort.__version__
    major_minor = ort.__version__.split(".")
    assert api.api_version == min(int(major_minor[1]), 31)
    assert api.supports_run_profiling == (api.api_version >= 25)
    assert api.has("Run") and api.has("RunOptionsEnableProfiling")
    assert not api.has("NoSuchFunction")
    assert load_api() is api
    assert load_api(api.library_path) is api


def test_load_api_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.so"):
        load_api(tmp_path / "missing.so")
    not_a_library = tmp_path / "libonnxruntime.so.0"
    not_a_library.write_text("no")
    with pytest.raises(OSError, match="cannot load the ONNX Runtime C API"):
        load_api(not_a_library)


def test_api_versions_of_slots() -> None:
    assert first_api_version(9) == 1  # Run
    assert first_api_version(273) == 17  # SetDeterministicCompute
    assert first_api_version(414) == 24  # GetTensorElementTypeAndShapeDataReference
    assert first_api_version(415) == 25  # RunOptionsEnableProfiling
    with pytest.raises(ValueError, match="beyond"):
        first_api_version(417)


def test_missing_function_is_not_implemented(
    api: CApi, mlp_session: CSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an ORT older than 1.25 answers to a profiled run."""
    monkeypatch.delitem(api._functions, "RunOptionsEnableProfiling")
    assert not api.has("RunOptionsEnableProfiling")
    with pytest.raises(OrtError) as caught:
        mlp_session.run({"x": np.ones((1, 32), np.float32)}, profile_prefix="never")
    assert (caught.value.code_name, caught.value.function) == (
        "NOT_IMPLEMENTED",
        "RunOptionsEnableProfiling",
    )
    assert "needs ORT C API version 25" in caught.value.message


def test_tensor_round_trip_through_every_reader(api: CApi) -> None:
    """The pre-API-24 shape reader and the device check agree with the default path."""
    codec = ValueCodec(api, check_device=True)
    array = RNG.standard_normal((2, 3)).astype(np.float16)
    value = ffi.new("OrtValue**")
    keep: list[Any] = []
    codec.to_ort("x", array, value, keep)
    try:
        assert codec._type_and_shape_by_info(value[0]) == (10, [2, 3])
        assert codec._type_and_shape_by_reference(value[0]) == (10, [2, 3])
        assert_same(codec.tensor("x", value[0]), array)
    finally:
        api.function("ReleaseValue")(value[0])


# --- outputs equal to InferenceSession.run ----------------------------------------------


def test_float_mlp(mlp: bytes) -> None:
    check_twin(mlp, {"x": RNG.standard_normal((5, 32)).astype(np.float32)})


@pytest.mark.parametrize(
    ("element", "dtype"),
    [
        (T.INT8, np.int8), (T.INT16, np.int16), (T.INT32, np.int32), (T.INT64, np.int64),
        (T.UINT8, np.uint8), (T.UINT16, np.uint16), (T.UINT32, np.uint32),
        (T.UINT64, np.uint64), (T.FLOAT16, np.float16), (T.DOUBLE, np.float64),
    ],
)  # fmt: skip
def test_numeric_types(element: int, dtype: type[Any]) -> None:
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    a = np.array([info.max, info.min, 1, 0, 3, 7], dtype).reshape(2, 3)
    b = np.array([[1, 1, 2], [5, 0, 9]], dtype)  # integers wrap, floats overflow to inf
    check_twin(capi_models.arithmetic(element), {"a": a, "b": b})


def test_bool() -> None:
    a, b = np.array([True, False, True]), np.array([True, True, False])
    check_twin(capi_models.logic(), {"a": a, "b": b})


@pytest.mark.parametrize(
    ("s", "t"),
    [
        (np.array(["a", "bé", ""]), np.array(["v"])),  # str_ arrays
        # str_ arrays are read up to a NUL, as ORT's Python API does
        (np.array(["a", "b\0c"]), np.array(["t\0u", "v"])),
        # object arrays: str(item), NULs kept, as ORT's Python API does
        (np.array(["x", "b\0c", 1, 2.5, None, b"y"], dtype=object), np.array([], dtype=object)),
    ],
)
def test_strings(s: np.ndarray[Any, Any], t: np.ndarray[Any, Any]) -> None:
    ours = check_twin(capi_models.strings(), {"s": s, "t": t})
    assert ours[0].dtype == object


def test_bytes_array_input_is_unsupported() -> None:
    """ORT's Python API reads a bytes item that fills its width on into the next one (and past
    the array's end): its outputs are not reproducible, so such runs stay on ORT."""
    feeds = {"s": np.array([b"ab", b"c"]), "t": np.array(["v"])}
    assert list(ort.InferenceSession(capi_models.strings()).run(None, feeds)[0]) == ["abc", "c"]
    with (
        CSession(SessionConfig(capi_models.strings())) as session,
        pytest.raises(UnsupportedValue, match=r"'s': bytes arrays \(\|S2\) are not taken"),
    ):
        session.run(feeds)


def test_str_array_of_the_other_byte_order_is_unsupported() -> None:
    """ORT's Python API reads a str array's characters in this machine's byte order, whatever
    the dtype says: its outputs are not reproducible, so such runs stay on ORT."""
    swapped = np.array(["\u0100\u0200"], dtype=np.dtype("U2").newbyteorder())
    feeds = {"s": swapped, "t": np.array(["v"])}
    ours_would_be = "\u0100\u0200v"
    assert ort.InferenceSession(capi_models.strings()).run(None, feeds)[0][0] != ours_would_be
    with (
        CSession(SessionConfig(capi_models.strings())) as session,
        pytest.raises(UnsupportedValue, match=r"'s': str arrays of the other byte order"),
    ):
        session.run(feeds)


def test_no_output_names_means_every_output(mlp_session: CSession) -> None:
    feeds = {"x": np.ones((1, 32), np.float32)}
    assert len(mlp_session.run(feeds, [])) == len(mlp_session.output_names) == 1
    errors: list[str] = []

    def ask() -> None:
        try:
            mlp_session.last_run_started_ns()
        except RuntimeError as exc:
            errors.append(str(exc))

    other = threading.Thread(target=ask)
    other.start()
    other.join()
    assert errors == ["last_run_started_ns: this thread has not run the session"]


def test_scalar_and_empty_outputs() -> None:
    model = capi_models.reductions()
    ours = check_twin(model, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2})
    assert ours[0].shape == ()
    ours = check_twin(model, {"x": np.zeros((0, 3), np.float32)})
    assert ours[1].shape == (0, 3)


def test_input_layouts_as_python_api(mlp: bytes) -> None:
    """Non-contiguous inputs are copied; other byte orders pass raw, as ORT's Python API does."""
    wide = RNG.standard_normal((5, 64)).astype(np.float32)
    check_twin(mlp, {"x": wide[:, ::2]})
    check_twin(mlp, {"x": wide[:, :32].astype(">f4")})


def test_float8_e4m3fn_output_is_raw_uint8() -> None:
    ours = check_twin(capi_models.casts(T.FLOAT8E4M3FN), {"x": np.array([1.5, -2, 3, 0.1], "f4")})
    assert ours[0].dtype == np.uint8


@pytest.mark.parametrize("element", [T.BFLOAT16, T.FLOAT8E5M2, T.INT4])
def test_outputs_python_cannot_convert_are_unsupported(element: int) -> None:
    model = capi_models.casts(element)
    feeds = {"x": np.ones(4, np.float32)}
    with (
        CSession(SessionConfig(model)) as session,
        pytest.raises(UnsupportedValue, match=r"'y'.*tensor\((bfloat16|float8e5m2|int4)\)"),
    ):
        session.run(feeds)
    with pytest.raises(RuntimeError, match="No corresponding Numpy type"):
        ort.InferenceSession(model).run(None, feeds)


def test_a_string_output_that_is_not_utf8_is_an_output_the_binding_cannot_return() -> None:
    """ORT ran: the run is complete (UnsupportedOutput); ORT's Python API fails there too."""
    model = capi_models.constant_strings([b"ok", b"\xff\xfe"])
    with (
        CSession(SessionConfig(model)) as session,
        pytest.raises(UnsupportedOutput, match=r"output 'y': string is not UTF-8"),
    ):
        session.run({})
    with pytest.raises(UnicodeDecodeError):
        ort.InferenceSession(model).run(None, {})


def test_if_both_branches() -> None:
    x = np.array([1.5, -3.25], np.float32)
    then, other = (
        check_twin(capi_models.branch(), {"cond": np.array(c), "x": x}) for c in (True, False)
    )
    assert then[0].tolist() == [2.5, -2.25] and other[0].tolist() == [3.0, -6.5]


def test_loop_and_scan() -> None:
    x = RNG.standard_normal(3).astype(np.float32)
    feeds = {"trips": np.array(4, np.int64), "start": np.zeros(3, np.float32), "x": x}
    assert check_twin(capi_models.loop(), feeds)[1].shape == (4, 3)
    rows = RNG.standard_normal((5, 2)).astype(np.float32)
    check_twin(capi_models.scan(), {"start": np.ones(2, np.float32), "rows": rows})


def test_sequences() -> None:
    x = RNG.standard_normal((3, 2)).astype(np.float32)
    ours = check_twin(capi_models.sequences(), {"x": x, "s": np.array(["p", "qé"])})
    assert len(ours[0]) == 3 and isinstance(ours[1][0][0], str)


@pytest.mark.parametrize("labels", [[10, 20, 30], ["cat", "dog", "emu"]])
def test_zipmap_maps(labels: list[Any]) -> None:
    ours = check_twin(capi_models.zipmap(labels), {"x": RNG.standard_normal((4, 3), np.float32)})
    assert list(ours[0][0]) == labels


def test_optional_outputs() -> None:
    ours = check_twin(capi_models.optionals(), {"x": np.array([1.0, 2.0], np.float32)})
    assert ours[0] is None


def test_input_types_match_python_api() -> None:
    model = capi_models.typed_inputs()
    with CSession(SessionConfig(model)) as session:
        expected = tuple(i.type for i in ort.InferenceSession(model).get_inputs())
        assert session.input_types == expected
        assert expected[1:] == (
            "seq(tensor(float))",
            "map(int64,tensor(double))",
            "optional(tensor(float))",
        )
        with pytest.raises(UnsupportedValue, match="input 'seq': list is not supported"):
            session.run({"tensor": np.ones(1, np.float16), "seq": [np.ones(1, np.float32)]})


def test_output_subset_and_order(mlp_session: CSession) -> None:
    model = capi_models.arithmetic(T.INT32)
    feeds = {"b": np.ones((1, 3), np.int32), "a": np.arange(3, dtype=np.int32).reshape(1, 3)}
    with CSession(SessionConfig(model)) as session:
        assert session.output_names == ("same", "sum", "cat")
        for _ in range(2):  # the second run uses the cached C name arrays
            ours = session.run(feeds, ["cat", "same"])
        assert_same(ours, ort.InferenceSession(model).run(["cat", "same"], feeds))


# --- errors --------------------------------------------------------------------------------


def _python_error(model: bytes, feeds: dict[str, Any]) -> str:
    with pytest.raises(Exception) as caught:
        ort.InferenceSession(model).run(None, feeds)
    return str(caught.value)


def test_wrong_input_name(mlp_session: CSession) -> None:
    """ORT's Python API checks names itself; the C API reports ORT's own message."""
    with pytest.raises(OrtError) as caught:
        mlp_session.run({"X": np.ones((1, 32), np.float32)})
    assert (caught.value.code_name, caught.value.message) == (
        "INVALID_ARGUMENT",
        "Invalid input name: X",
    )


@pytest.mark.parametrize(
    "feeds",
    [
        {"x": np.ones((1, 32), np.float64)},  # wrong dtype
        {"x": np.ones(32, np.float32)},  # wrong rank
        {"x": np.ones((1, 31), np.float32)},  # wrong dimension
    ],
)
def test_run_errors_carry_ort_code_and_message(
    mlp: bytes, mlp_session: CSession, feeds: dict[str, Any]
) -> None:
    with pytest.raises(OrtError) as caught:
        mlp_session.run(feeds)
    error = caught.value
    assert (error.code, error.code_name, error.function) == (2, "INVALID_ARGUMENT", "Run")
    assert error.message and error.message in _python_error(mlp, feeds)
    assert str(error) == f"Run failed: INVALID_ARGUMENT: {error.message}"


def test_non_array_input_is_unsupported(mlp_session: CSession) -> None:
    with pytest.raises(UnsupportedValue, match="input 'x': list is not supported"):
        mlp_session.run({"x": [[1.0] * 32]})


def test_missing_and_garbage_models(tmp_path: Path) -> None:
    with pytest.raises(OrtError) as caught:
        CSession(SessionConfig(str(tmp_path / "missing.onnx")))
    assert (caught.value.code_name, caught.value.function) == ("NO_SUCHFILE", "CreateSession")
    with pytest.raises(OrtError) as caught:
        CSession(SessionConfig(b"not a model"))
    assert caught.value.code_name == "INVALID_PROTOBUF"


def test_model_from_path_with_non_ascii_name(tmp_path: Path, mlp: bytes) -> None:
    path = tmp_path / "modèle.onnx"
    path.write_bytes(mlp)
    check = SessionConfig(str(path))
    with CSession(check) as session:
        assert session.input_names == ("x",)


def test_providers(mlp: bytes) -> None:
    with pytest.raises(UnsupportedValue, match="'TensorrtExecutionProvider' is not supported"):
        CSession(SessionConfig(mlp, providers=(("TensorrtExecutionProvider", {}),)))
    with pytest.raises(UnsupportedValue, match="cannot come before"):
        CSession(
            SessionConfig(
                mlp, providers=(("CPUExecutionProvider", {}), ("CUDAExecutionProvider", {}))
            )
        )
    cuda = (("CUDAExecutionProvider", {"device_id": "0"}),)
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA; the test covers the CPU-only wheel")
    with pytest.raises(OrtError) as caught:
        CSession(SessionConfig(mlp, providers=cuda))
    assert caught.value.code_name == "FAIL"
    assert "CUDA execution provider is not enabled in this build" in caught.value.message


def test_a_termination_requested_before_the_run_fails_it(mlp_session: CSession) -> None:
    termination = Termination()
    termination.request()
    with pytest.raises(OrtError, match="terminate flag"):
        mlp_session.run({"x": np.ones((1, 32), np.float32)}, termination=termination)
    assert mlp_session.run({"x": np.ones((1, 32), np.float32)})  # the next run is unaffected


def test_a_termination_requested_from_another_thread_ends_the_run_in_flight() -> None:
    with CSession(SessionConfig(matmul_chain(nodes=256), intra_op_num_threads=1)) as session:
        termination = Termination()  # the run takes about 0.7 s here; ended after 0.05 s
        threading.Timer(0.05, termination.request).start()
        with pytest.raises(OrtError, match="terminate flag"):
            session.run({"x": np.ones((512, 512), np.float32)}, termination=termination)


# --- run-level profiling and session options -----------------------------------------------


def _profile(directory: Path, prefix: str) -> list[dict[str, Any]]:
    files = list(directory.glob(f"{prefix}_*.json"))
    assert len(files) == 1
    events: list[dict[str, Any]] = json.loads(files[0].read_text())
    return events


def _kernel_events(events: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in events if e["cat"] == "Node"]


def test_run_level_profiling(tmp_path: Path, mlp: bytes) -> None:
    x = np.ones((2, 32), np.float32)
    with CSession(SessionConfig(mlp)) as session:
        assert_same(
            session.run({"x": x}, profile_prefix=str(tmp_path / "p-1")), session.run({"x": x})
        )
        session.run({"x": x}, profile_prefix=str(tmp_path / "p-2"), run_tag="tagged")
    assert sorted(p.name.split("_")[0] for p in tmp_path.iterdir()) == ["p-1", "p-2"]
    events = _profile(tmp_path, "p-1")
    assert isinstance(events, list) and any(e["name"] == "model_run" for e in events)
    assert _kernel_events(events)


def _run_until(
    session: CSession, feeds: dict[str, Any], stop: threading.Event, errors: list[BaseException]
) -> None:
    try:
        while not stop.is_set():
            session.run(feeds)
    except BaseException as exc:
        errors.append(exc)


def test_first_profiled_run_runs_alone(tmp_path: Path) -> None:
    """Overlapping other runs, ORT's first profiled run of a session fails them or crashes."""
    model = mlp_model()
    feeds = {"x": np.ones((64, 256), np.float32)}  # big enough to use the thread pool
    errors: list[BaseException] = []
    for trial in range(5):
        stop = threading.Event()
        with CSession(SessionConfig(model)) as session:
            worker = threading.Thread(target=_run_until, args=(session, feeds, stop, errors))
            worker.start()
            try:
                for run in range(3):
                    session.run(feeds, profile_prefix=str(tmp_path / f"t{trial}-{run}"))
            finally:
                stop.set()
                worker.join()
    assert not errors
    assert len(list(tmp_path.glob("*.json"))) == 15


def test_graph_optimization_level_changes_the_profile(tmp_path: Path, mlp: bytes) -> None:
    x = np.ones((2, 32), np.float32)
    kernels = {}
    for level in (0, 99):
        with CSession(SessionConfig(mlp, graph_optimization_level=level)) as session:
            session.run({"x": x}, profile_prefix=str(tmp_path / f"level{level}"))
        kernels[level] = _kernel_events(_profile(tmp_path, f"level{level}"))
    assert len(kernels[0]) == 6  # 2 x (MatMul, Add, Relu)
    assert len(kernels[99]) < len(kernels[0])
    config = {"optimization.disable_specified_optimizers": "MatMulAddFusion"}
    with CSession(SessionConfig(mlp, graph_optimization_level=1, config_entries=config)) as session:
        session.run({"x": x}, profile_prefix=str(tmp_path / "unfused"))
    assert len(_kernel_events(_profile(tmp_path, "unfused"))) == 6


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def test_intra_op_threads(mlp: bytes) -> None:
    CSession(SessionConfig(mlp)).close()  # the first session starts process-wide threads
    for threads, pool in ((1, 0), (3, 2)):
        before = _threads()
        with CSession(SessionConfig(mlp, intra_op_num_threads=threads)):
            assert len(_threads() - before) == pool


def test_free_dimension_override(mlp: bytes) -> None:
    config = SessionConfig(mlp, free_dimension_overrides_by_name={"batch": 4})
    with CSession(config) as session:
        assert session.run({"x": np.ones((4, 32), np.float32)})[0].shape == (4, 32)
        with pytest.raises(OrtError) as caught:
            session.run({"x": np.ones((3, 32), np.float32)})
    assert caught.value.code_name == "INVALID_ARGUMENT"


def test_other_options_are_accepted(mlp: bytes) -> None:
    config = SessionConfig(
        mlp,
        inter_op_num_threads=2,
        execution_mode=1,
        enable_mem_pattern=False,
        enable_cpu_mem_arena=False,
        use_deterministic_compute=True,
        log_severity_level=3,
        free_dimension_overrides_by_denotation={"DATA_BATCH": 2},
    )
    x = RNG.standard_normal((3, 32)).astype(np.float32)
    with CSession(config) as session:
        ours = session.run({"x": x}, log_severity_level=3, run_config_entries={"a.b": "c"})
    assert_same(ours, ort.InferenceSession(mlp).run(None, {"x": x}))


# --- lifecycle and threads -----------------------------------------------------------------


def test_close_is_idempotent_and_final(mlp: bytes) -> None:
    session = CSession(SessionConfig(mlp))
    session.close()
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.run({"x": np.ones((1, 32), np.float32)})


def test_create_close_cycles_do_not_leak(mlp: bytes) -> None:
    x = np.ones((2, 32), np.float32)
    CSession(SessionConfig(mlp)).close()
    fds, threads = len(os.listdir("/proc/self/fd")), _threads()
    for _ in range(20):
        with CSession(SessionConfig(mlp)) as session:
            session.run({"x": x})
    assert len(os.listdir("/proc/self/fd")) <= fds
    assert not _threads() - threads


def test_concurrent_runs(mlp: bytes, mlp_session: CSession) -> None:
    python_session = ort.InferenceSession(mlp)
    feeds = [RNG.standard_normal((3, 32)).astype(np.float32) for _ in range(4)]
    expected = [python_session.run(None, {"x": x})[0] for x in feeds]
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for _ in range(50):
                assert_same(mlp_session.run({"x": feeds[index]})[0], expected[index])
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    run_threads(workers)
    assert not failures


def test_close_waits_for_runs_in_flight(mlp: bytes) -> None:
    session = CSession(SessionConfig(mlp))
    x = np.ones((256, 32), np.float32)
    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            while True:
                session.run({"x": x})
        except RuntimeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=hammer)
    worker.start()
    session.close()
    worker.join()
    assert len(errors) == 1 and "closed" in str(errors[0])


def test_close_gives_up_after_its_timeout() -> None:
    """So that a run that does not return cannot hold up the process's exit: the session is
    closed to new runs at once, and released later."""
    session = CSession(SessionConfig(mlp_model(width=32, depth=2)))
    x = np.ones((2, 32), np.float32)
    waiting, go = held_runs(session)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(session.run({"x": x})))
    worker.start()
    assert waiting.wait(10)
    assert session.close(timeout=0.01) is False
    with pytest.raises(RuntimeError, match="closed"):
        session.run({"x": x})
    go.set()
    worker.join()
    assert len(results) == 1 and results[0][0].shape == (2, 32)  # it ran to the end
    assert session.close(timeout=0) is True

"""The package as the OpenTelemetry ecosystem sees it: entry point, dependency check, typing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from otel_ort import OrtInstrumentor
from otel_ort.package import _instruments_any

ROOT = Path(__file__).resolve().parent.parent


def test_entry_point_loads_the_instrumentor() -> None:
    (entry_point,) = [
        ep for ep in entry_points(group="opentelemetry_instrumentor") if ep.name == "onnxruntime"
    ]
    assert entry_point.load() is OrtInstrumentor


def test_instruments_any_matches_the_package_metadata() -> None:
    requires = distribution("otel-ort").requires or []
    declared = sorted(
        str(Requirement(r.split(";")[0])) for r in requires if 'extra == "instruments-any"' in r
    )
    assert declared == sorted(str(Requirement(r)) for r in _instruments_any)


def test_dependency_check_accepts_any_one_ort_distribution() -> None:
    # only `onnxruntime` is installed here: the other distributions must not be required too
    assert OrtInstrumentor()._check_dependency_conflicts() is None


def test_console_script_and_version() -> None:
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("otel-ort")), "--version"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert completed.stdout.startswith("otel-ort ")


@pytest.mark.e2e
def test_wheel_ships_py_typed_and_entry_point(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ behind
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("otel_ort-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "otel_ort/py.typed" in names
        assert "otel_ort/report/static/report.js" in names  # the page is package data
        built = {name.split(".")[0] for name in names if name.endswith(".so")}
        stubs = {name.removesuffix(".pyi") for name in names if name.endswith(".pyi")}
        (entry_points_txt,) = [n for n in names if n.endswith("entry_points.txt")]
        text = archive.read(entry_points_txt).decode()
    assert "[opentelemetry_instrumentor]\nonnxruntime = otel_ort:OrtInstrumentor" in text
    assert "otel-ort = otel_ort.cli:main" in text
    parts = {
        "otel_ort/profiles/_ort_nodes", "otel_ort/profiles/_node_parts",
        "otel_ort/perf/_track_text", "otel_ort/perf/_node_counts", "otel_ort/export/_span_frame",
    }  # fmt: skip
    assert stubs == parts  # their types, for mypy in users' projects
    if os.environ.get("CI") == "true" or shutil.which("cc"):  # a C compiler: all are built
        assert built == parts

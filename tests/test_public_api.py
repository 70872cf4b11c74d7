"""What users import keeps working: the names the docs and examples use, and the entry points."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples"]
_IMPORT = re.compile(r"^\s*from (otel_ort(?:\.\w+)*) import \(?([\w, ]+)\)?\s*(?:#.*)?$", re.M)


def documented_imports() -> list[tuple[str, str]]:
    """``(module, name)`` for every ``from otel_ort... import ...`` line users are shown."""
    found: set[tuple[str, str]] = set()
    for place in DOCUMENTS:
        files = (
            sorted(place.rglob("*.py")) + sorted(place.rglob("*.md")) if place.is_dir() else [place]
        )
        for path in files:
            for module, names in _IMPORT.findall(path.read_text()):
                found.update((module, name.strip()) for name in names.split(",") if name.strip())
    return sorted(found)


def test_the_docs_and_examples_show_imports() -> None:
    assert ("otel_ort", "OrtInstrumentor") in documented_imports()


@pytest.mark.parametrize(("module", "name"), documented_imports())
def test_a_documented_name_imports(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("otel_ort", "OrtInstrumentor"),  # the opentelemetry_instrumentor entry point
        ("otel_ort", "configure"),
        ("otel_ort", "flush_profiles"),
        ("otel_ort", "profile_next_run"),
        ("otel_ort", "__version__"),
        ("otel_ort.cli", "main"),  # the otel-ort command
        ("otel_ort.instrumentation", "OrtInstrumentor"),
        ("otel_ort.sampling", "ProfileSampler"),
        ("otel_ort.sampling", "Never"),
        ("otel_ort.sampling", "Always"),
        ("otel_ort.sampling", "Ratio"),
        ("otel_ort.sampling", "RateLimited"),
        ("otel_ort.sampling", "EveryNth"),
        ("otel_ort.sampling", "ParentBased"),
        ("otel_ort.report", "write_report"),
        ("otel_ort.failures", "failure_counts"),
        ("otel_ort.demo_model", "mlp_model"),
        ("otel_ort.profiles", "read_profile"),
    ],
)
def test_a_public_name_imports(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


def test_the_entry_points_name_existing_objects() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for target in re.findall(r'=\s*"(otel_ort[\w.]*:\w+)"', text):
        module, name = target.split(":")
        assert hasattr(importlib.import_module(module), name), target

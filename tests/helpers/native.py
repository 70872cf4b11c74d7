"""The optional C parts (``setup.py``): a test of one is skipped where it was not built, but
not in CI, whose machine has a C compiler and Python's headers."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def native_part(name: str) -> ModuleType:
    """The C module ``name``; the test is skipped where it was not built (outside CI)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"{name} was not built in CI: {exc}") from exc
        pytest.skip(f"{name}, an optional C part, was not built here (no C compiler at install)")

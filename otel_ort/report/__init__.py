"""``otel-ort report``: a profile file as one self-contained HTML page.

The page shows one run at a time (a picker switches runs of a session-level file): a
timeline of its nodes per thread with their GPU kernels, the time per op type, the top nodes
with their perf counters when the file has them, and the run's trace and span ids. Scripts,
styles and data are inline and the page's Content-Security-Policy forbids any fetch, so it
opens from disk, offline, and never calls out.

Modules: ``model`` turns a read profile (with what ``otel_ort.profiles.enriched`` reads of
otel-ort's additions to a kept file) into the page's compact data, ``html`` assembles the
page from it and ``static/``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_ort._util.gc_pause import gc_paused
from otel_ort.profiles import enriched
from otel_ort.profiles.reader import ProfileError, read_profile
from otel_ort.profiles.records import Profile
from otel_ort.report.html import render_page
from otel_ort.report.page_data import DEFAULT_TOP, ReportError, page_data

__all__ = [
    "DEFAULT_TOP",
    "Report",
    "ReportError",
    "build_report",
    "default_output",
    "render_html",
    "save_report",
    "write_report",
]


@dataclass(frozen=True)
class Report:
    """A rendered page and what it says about the file (for the terminal)."""

    html: str
    notes: list[str]
    """Problems with the file or the request, also shown at the top of the page."""
    run: int
    """The run shown first."""
    runs: int
    nodes: int
    """Nodes of the run shown first."""


def render_html(
    profile: Profile,
    *,
    perf: bool | None = None,
    top: int = DEFAULT_TOP,
    run: int | None = None,
    other_data: Mapping[str, Any] | None = None,
) -> str:
    """The page for a read profile.

    ``perf``: ``None`` (default) shows perf counters when the file has them, ``True`` asks
    for them (a note on the page when there are none), ``False`` leaves them out. ``top``:
    rows of the top-nodes table. ``run``: the run shown first (default: the first with
    events). ``other_data``: the file's ``otherData`` (default: read from ``profile.path``).
    Raises :class:`ReportError` when there is nothing to draw.
    """
    return _report(profile, perf, top, run, other_data).html


def build_report(
    path: str | os.PathLike[str],
    *,
    perf: bool | None = None,
    top: int = DEFAULT_TOP,
    run: int | None = None,
) -> Report:
    """Read the profile at ``path`` and render its page; :class:`ReportError` (one line
    naming the problem and the fix) for a missing or unreadable file or an empty run."""
    return _report(_read(path), perf, top, run, None)


def write_report(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    perf: bool | None = None,
    top: int = DEFAULT_TOP,
    run: int | None = None,
) -> Path:
    """Write the report of the profile at ``path`` to ``out`` (a file, or a directory to
    put ``<profile name>.html`` in); return the file written. :class:`ReportError` for bad
    input, ``OSError`` when ``out`` cannot be written."""
    report = build_report(path, perf=perf, top=top, run=run)
    return save_report(report, path, out)


def save_report(report: Report, path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``report`` (of the profile at ``path``) to ``out``, a file or a directory (a
    ``str`` ending in a slash is a directory, created if missing; a ``Path`` drops that
    slash); never over the profile itself (:class:`ReportError`)."""
    target = Path(out)
    if os.fspath(out).endswith(os.sep):
        target.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        target = target / default_output(path).name
    if target.exists() and target.samefile(path):
        raise ReportError(f"{target} is the profile itself: write the report elsewhere (-o)")
    _write_atomically(target, report.html)
    return target


def default_output(path: str | os.PathLike[str]) -> Path:
    """``<profile name>.html`` in the current directory."""
    return Path(Path(path).stem + ".html")


def _read(path: str | os.PathLike[str]) -> Profile:
    name = os.fspath(path)
    if not os.path.exists(name):
        raise ReportError(
            f"{name}: no such file: pass the path of a profile file (ORT's "
            "onnxruntime_profile_*.json or one otel-ort kept, otel-ort_*.json.gz)"
        )
    try:
        return read_profile(name)
    except ProfileError as exc:
        raise ReportError(
            f"{exc}; a report needs a profile file ORT wrote (enable_profiling) or otel-ort "
            "kept (profile_dir, `otel-ort profile`)"
        ) from None


def _report(
    profile: Profile,
    perf: bool | None,
    top: int,
    run: int | None,
    other_data: Mapping[str, Any] | None,
) -> Report:
    if other_data is None:
        other_data = enriched.other_data(profile.path)
    with gc_paused():  # many small lists and tuples, none of them cyclic
        page = page_data(profile, other_data=other_data, perf=perf, top=top, run=run)
    return Report(
        html=render_page(page),
        notes=page.notes,
        run=page.run,
        runs=len(profile.runs),
        nodes=len(profile.runs[page.run].nodes),
    )


def _write_atomically(target: Path, text: str) -> None:
    """Readers never see half a page: a new file in the same directory (mode from the umask,
    like any file the user writes), renamed over the target."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        # a lone surrogate (a JSON escape in a node name) as "\ud800": in the page's data, a
        # JSON escape again
        with os.fdopen(descriptor, "w", encoding="utf-8", errors="backslashreplace") as file:
            file.write(text)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

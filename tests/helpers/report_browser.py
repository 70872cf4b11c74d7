"""Headless Debian chromium driven by playwright, for the report's browser tests.

No browser is downloaded: the test stage installs Debian's ``chromium`` (``apt-get install
chromium``), and playwright drives that binary. When it is missing the browser tests are
skipped on a developer's machine and fail in CI (``$CI`` set), where a skip would hide them.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM = os.environ.get("OTEL_ORT_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RENDER_TIMEOUT_MS = 30_000
T = TypeVar("T")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so the browser tests must run)", pytrace=False)
    pytest.skip(reason)


def require_chromium() -> str:
    """The chromium binary, or skip (fail in CI) saying how to install it."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        _unavailable(
            f"no chromium at {CHROMIUM}: install it (apt-get install chromium) or point "
            "$OTEL_ORT_CHROMIUM at one"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is missing: pip install -e '.[dev]'")
    return CHROMIUM


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (playwright ``Browser``)."""
    executable = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class OpenedReport:
    """A report open in a page, with everything the page asked the network for."""

    page: Any
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Uncaught exceptions and console errors (CSP violations among them)."""
    rendered_ms: float = 0.0
    """From navigation start to the page's rendered marker."""

    def count(self, selector: str) -> int:
        return int(self.page.locator(selector).count())

    def close(self) -> None:
        self.page.close()


def open_report(browser: Any, path: Path, width: int = 1400, height: int = 900) -> OpenedReport:
    """Open ``path`` and wait until the page says it has rendered."""
    page = browser.new_page(viewport={"width": width, "height": height})
    opened = OpenedReport(page)
    page.on("request", lambda request: opened.requests.append(request.url))
    page.on("pageerror", lambda error: opened.errors.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            opened.errors.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.goto(path.resolve().as_uri())
    page.wait_for_function(
        "document.body.dataset.rendered || document.body.dataset.renderError",
        timeout=RENDER_TIMEOUT_MS,
    )
    error = page.evaluate("document.body.dataset.renderError")
    assert not error, f"the report failed to render: {error}; {opened.errors}"
    opened.rendered_ms = float(page.evaluate("document.body.dataset.rendered"))
    return opened


def save_screenshot(opened: OpenedReport, directory: Path, name: str) -> list[Path]:
    """A full-page screenshot in ``directory`` and, when set, ``$OTEL_ORT_ARTIFACTS``."""
    targets = [directory / name]
    artifacts = os.environ.get("OTEL_ORT_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        targets.append(Path(artifacts) / name)
    image = opened.page.screenshot(full_page=True)
    for target in targets:
        target.write_bytes(image)
    return targets


# Reads what DevTools' trace engine made of the loaded file. These two methods are the ones
# DevTools' own layout tests use; should a Chromium update rename them, this fails loudly.
_PARSED_TRACE_JS = """async () => {
  const timeline = await import('./panels/timeline/timeline.js');
  const panel = timeline.TimelinePanel.TimelinePanel.instance();
  const parsed = panel.getParsedTraceForLayoutTests();
  const threads = [];
  for (const [pid, process] of parsed.Renderer.processes) {
    for (const [tid, thread] of process.threads) {
      threads.push({pid, tid, name: thread.name ?? null,
                    entries: (thread.entries ?? []).map(entry => entry.name)});
    }
  }
  const raw = panel.getTraceEngineRawTraceEventsForLayoutTests();
  return {events: raw.length, threads,
          runArgs: raw.filter(event => event.name === 'model_run').map(event => event.args)};
}"""


def open_in_devtools(browser: Any, path: Path, screenshot: Path) -> dict[str, Any]:
    """Load the Chrome-trace file at ``path`` into Chromium's DevTools Performance panel (the
    trace viewer that replaced chrome://tracing, which Debian's chromium refuses to open)
    through its "Load trace…" button and file chooser, as a user does, and return what its
    trace engine parsed: the number of events, each thread's name and entries, the
    ``model_run`` events' args. DevTools is served by a second chromium, launched through
    ``browser``'s playwright with a debugging port. (Chromium 156 no longer loads a trace
    given to ``trace_app.html`` in its URL.)"""
    from tests.helpers.otlp_receiver import free_port

    port = free_port()
    served = browser.browser_type.launch(
        executable_path=require_chromium(), args=[*ARGS, f"--remote-debugging-port={port}"]
    )
    try:
        page = served.new_page(viewport={"width": 1400, "height": 800})
        page.goto(f"http://127.0.0.1:{port}/devtools/trace_app.html")
        load = page.get_by_role("button", name=re.compile(r"^Load (trace|profile)…$"))
        performance = page.get_by_text("Performance", exact=True).first
        performance.or_(load).first.wait_for(timeout=RENDER_TIMEOUT_MS)
        if not load.first.is_visible():  # the panel is a tab, not the page
            _click_past_dialogs(page, performance)
        with page.expect_file_chooser(timeout=RENDER_TIMEOUT_MS) as chooser:
            _click_past_dialogs(page, load.first)  # the dialog may come at any time
        chooser.value.set_files(path)
        page.get_by_text("Summary", exact=True).wait_for(timeout=RENDER_TIMEOUT_MS)
        parsed: dict[str, Any] = _parsed_trace(page)
        screenshot.write_bytes(page.screenshot())
    finally:
        served.close()
    return parsed


def _click_past_dialogs(page: Any, target: Any) -> None:
    """Click ``target``, closing (Escape) whatever dialog covers it: served this way, DevTools
    says, soon after it opens, that its debugging connection closed (it has no page to
    debug)."""
    _retried(lambda: target.click(timeout=2000), lambda: page.keyboard.press("Escape"))


def _parsed_trace(page: Any) -> dict[str, Any]:
    """``_PARSED_TRACE_JS``'s result once the panel has parsed the loaded file."""
    parsed: dict[str, Any] = _retried(
        lambda: page.evaluate(_PARSED_TRACE_JS), lambda: time.sleep(0.2)
    )
    return parsed


def _retried(attempt: Callable[[], T], between: Callable[[], object]) -> T:
    """``attempt()`` until it succeeds, ``between()`` after each failure; after
    ``RENDER_TIMEOUT_MS`` the last failure is raised."""
    deadline = time.monotonic() + RENDER_TIMEOUT_MS / 1000
    while True:
        try:
            return attempt()
        except Exception:
            if time.monotonic() > deadline:
                raise
            between()

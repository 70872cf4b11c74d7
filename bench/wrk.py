"""Driving Debian's ``wrk`` HTTP load generator and reading its report.

``make bench`` installs ``wrk`` when it is missing (``apt-get install wrk``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_TIME = r"([\d.]+)(us|ms|s|m|h)"


class WrkReportError(ValueError):
    """wrk's output lacks a figure this module reads."""


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: completed requests and their latency percentiles."""

    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    """Socket errors (connect, read, write, timeout) plus responses other than 2xx/3xx."""


def parse_report(text: str) -> WrkResult:
    """The figures of ``wrk --latency``'s report; ``WrkReportError`` naming what is missing."""
    percentiles = {
        int(share): _ms(value, unit)
        for share, value, unit in re.findall(rf"^\s+(50|99)%\s+{_TIME}\s*$", text, re.M)
    }
    requests = re.search(r"^\s*(\d+) requests in ", text, re.M)
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    missing = [
        name
        for name, found in (
            ("the 50% latency (run wrk with --latency)", 50 in percentiles),
            ("the 99% latency (run wrk with --latency)", 99 in percentiles),
            ("the request count", requests),
            ("Requests/sec", rate),
        )
        if not found
    ]
    if missing or requests is None or rate is None:
        raise WrkReportError(f"wrk's report has no {', '.join(missing)}:\n{text}")
    sockets = re.search(r"^\s*Socket errors:(.*)$", text, re.M)
    errors = sum(int(n) for n in re.findall(r"\d+", sockets.group(1))) if sockets else 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return WrkResult(
        requests=int(requests.group(1)),
        requests_per_s=float(rate.group(1)),
        p50_ms=percentiles[50],
        p99_ms=percentiles[99],
        errors=errors + (int(non_2xx.group(1)) if non_2xx else 0),
    )


def _ms(value: str, unit: str) -> float:
    return float(value) * _UNIT_MS[unit]


def post_script(body: Path) -> str:
    """A wrk Lua script that POSTs ``body`` (a JSON file) on every request."""
    return (
        f'local file = assert(io.open("{body}", "rb"))\n'
        "wrk.method = 'POST'\n"
        "wrk.body = file:read('*a')\n"
        "file:close()\n"
        "wrk.headers['Content-Type'] = 'application/json'\n"
    )


def wrk_binary() -> str:
    """wrk's path; ``SystemExit`` saying how to install it when it is missing."""
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    return found


def run_wrk(
    url: str, script: Path, seconds: float, threads: int = 2, connections: int = 8
) -> WrkResult:
    """Load ``url`` for ``seconds`` with ``connections`` connections over ``threads``
    threads, each request as ``script`` says."""
    done = subprocess.run(
        [
            wrk_binary(),
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + 60,
    )
    if done.returncode != 0:
        raise WrkReportError(f"wrk exited {done.returncode}: {done.stderr or done.stdout}")
    return parse_report(done.stdout)

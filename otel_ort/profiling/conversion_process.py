"""The instrumented process's side of the conversion process: a Python process of otel-ort's
that converts profiled runs, so that the conversion's CPU does not hold this process's GIL.

A service's request threads need the GIL between ORT's runs; a conversion on the worker
thread holds it for nearly all its CPU, which cost a GIL-bound service several times the
conversion's share of the CPU (``docs/benchmarks.md``). Here the worker only sends the job
and waits for the answer (the GIL let go while it waits), then hands the encoded spans on.

The process starts on the first profiled run that can use it, and the worker converts
profiles itself until the process says it is ready (within ``START_TIMEOUT_S``, else that
is a failure). It ends with the profiler (``close``) or when this process ends (its input
closes). A job it does not answer in ``JOB_TIMEOUT_S``, one
during which it ends, or one it could not convert (a bug of otel-ort's there) is lost: the
run span says so, and the next run starts a new process. After ``MAX_FAILURES`` failures in
a row (to start, or to answer), conversions run on the worker thread, and a warning says
why. A process forked from this one starts its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from otel_ort._util.forking import after_fork_in_child
from otel_ort.failures import report_failure
from otel_ort.profiling.conversion_job import ConversionJob, Converted
from otel_ort.profiling.conversion_server import JobFailed, Ready
from otel_ort.profiling.frames import read_frame, readable, write_frame
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

START_TIMEOUT_S = 30.0
"""How long a new process may take to be ready (docs/benchmarks.md: its start)."""
JOB_TIMEOUT_S = 120.0
"""How long it waits for one run's answer (a 10,000-node run takes about 1 s)."""
READY_READ_S = 1.0
"""How long reading its first frame may take once it has begun (a stray print before it)."""
MAX_FAILURES = 3
"""Failures in a row after which conversions stay on the worker thread."""

ANSWER_PIPE_BYTES = 512 << 10
"""The capacity of the pipe the answers come back on, where Linux allows it (64 KiB by
default): a run's answer (about 300 KB for 235 nodes) then comes in one write, and the
worker, which waits for it with the GIL let go, wakes once for it rather than once per 64
KiB. Each wake takes the GIL back from the service's threads. Linux counts a pipe's
capacity against its user's pipe buffers (``fs.pipe-user-pages-soft``, 64 MiB by
default): this one pipe, 512 KiB of it, lets about a hundred instrumented processes of one
user stay under that."""

NICENESS = 10
"""How much lower the process's CPU priority is than this process's: under a saturated CPU
the service's threads come first, and conversions, which nothing waits for, take the rest."""

_BOOTSTRAP = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
answers = os.dup(1)  # frames only: from here on what is printed goes to standard error
os.dup2(2, 1)
try:
    os.nice(int(sys.argv[2]))
except OSError:  # a sandbox that refuses it: the service's own priority
    pass
sys.path[:] = __import__("json").loads(sys.argv[1])
from otel_ort.profiling.conversion_server import main
main(answers)
"""
"""The process's program: signals and its answers' descriptor first, before any import."""
_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*[a-z]*")

MALLOC_ENVIRONMENT = {
    "MALLOC_TRIM_THRESHOLD_": str(32 << 20),
    "MALLOC_MMAP_THRESHOLD_": str(4 << 20),
}
"""glibc's malloc in the process keeps up to 32 MB free at the top of its heap and serves
buffers below 4 MB from the heap: each conversion reuses the memory the last one freed
instead of faulting it in anew (docs/decisions.md). Set unless the user tuned malloc
(these variables, or ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``)."""


@dataclass(frozen=True, slots=True)
class Lost:
    """The job got no answer: the process ended or stopped answering, or the conversion
    failed there (``detail`` says which, for the run span)."""

    detail: str


class ConversionProcess:
    """Sends conversion jobs to a process of its own; used by one thread at a time."""

    def __init__(self) -> None:
        self._path = _import_path()
        """This process's ``sys.path`` now, absolute (a later ``chdir`` does not move it)."""
        self._child: subprocess.Popen[bytes] | None = None
        self._ready = False
        """The process has said it is ready."""
        self._started = 0.0
        self._failures = 0
        self.conversions = 0
        """Jobs it answered with a conversion."""
        self._closed = False
        self._lock = threading.Lock()
        self.unavailable = ""
        """Why conversions run on the worker thread for good (empty: they need not)."""
        after_fork_in_child(self, ConversionProcess._forget)

    @property
    def pid(self) -> int | None:
        """The running process's id (``None``: none is running)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def convert(self, job: ConversionJob) -> Converted | Lost | None:
        """``job`` done in the conversion process (started if need be); ``Lost`` when it gave
        no answer; ``None`` when there is no process to do it (the caller does it itself)."""
        with self._lock:
            child = self._running()
            if child is None:
                return None
            assert child.stdin is not None and child.stdout is not None
            try:
                deadline = time.monotonic() + JOB_TIMEOUT_S
                write_frame(child.stdin.fileno(), job, JOB_TIMEOUT_S)
                answer = read_frame(child.stdout.fileno(), max(0.0, deadline - time.monotonic()))
            except Exception as exc:  # a closed pipe, no answer in time, a broken frame
                return Lost(self._failed(f"it stopped while converting this run ({exc!r})"))
            if self._closed:  # killed by a close() that could not wait: not left a zombie
                self._failed("it was closed")
            if isinstance(answer, Converted):
                self._failures = 0
                self.conversions += 1
                return answer
            if isinstance(answer, JobFailed):
                report_failure("a profile's conversion failed", answer.detail)
                last = answer.detail.strip().splitlines()[-1:]
                return Lost(self._failed(f"it could not convert this run ({''.join(last)})"))
            if answer is None:
                return Lost(self._failed("it ended while converting this run"))
            return Lost(self._failed(f"it answered {type(answer).__name__}"))

    def close(self, timeout: float = 2.0) -> None:
        """End the process: its input closes, then it is killed if it has not ended in
        ``timeout`` seconds. Later jobs are left to the caller."""
        self._closed = True
        if not self._lock.acquire(timeout=timeout):  # a job still waits for its answer
            child = self._child
            if child is not None:
                child.kill()  # that job is lost, and said on its run span
            return
        try:
            child, self._child = self._child, None
            ready, self._ready = self._ready, False
        finally:
            self._lock.release()
        if child is not None:
            _end(child, timeout if ready else 0.0)  # one still importing reads no input

    def start(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Start the process if none runs, and wait until it is ready (benchmarks and tests:
        the worker never waits for it); whether it is. A process that fails meanwhile is
        one failure: this does not start another."""
        deadline = time.monotonic() + timeout
        spawned = None
        while True:
            with self._lock:
                if spawned is not None and self._child is not spawned:
                    return False
                if self._running() is not None:
                    return True
                spawned = self._child
                if spawned is None or time.monotonic() > deadline:
                    return False
            time.sleep(0.01)

    def _running(self) -> subprocess.Popen[bytes] | None:
        """The process, started if none runs, once it is ready; ``None`` until then (it is
        not waited for: the caller converts meanwhile), or if it cannot be had."""
        if self.unavailable or self._closed:
            return None
        child = self._child
        if child is not None and child.poll() is not None:
            self._failed(f"it had ended (exit status {child.returncode})")
            child = None
        if child is None:
            if self.unavailable:
                return None
            child = self._spawn()
            if child is None:
                return None
        if self._ready:
            return child
        return child if self._readied(child) else None

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        """Start the process (it says when it is ready); ``None`` if it cannot start."""
        interpreter = sys.executable
        if not interpreter or not _INTERPRETER.fullmatch(os.path.basename(interpreter)):
            self._give_up(f"sys.executable ({interpreter!r}) is not a Python interpreter")
            return None
        environment = dict(os.environ)
        environment.pop("PYTHONPATH", None)  # an auto-instrumentation's sitecustomize: not here
        environment["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS routine here: no pool of threads
        if "glibc.malloc." not in environment.get("GLIBC_TUNABLES", ""):
            for name, value in MALLOC_ENVIRONMENT.items():
                environment.setdefault(name, value)
        try:
            self._child = subprocess.Popen(
                [interpreter, "-s", "-c", _BOOTSTRAP, json.dumps(self._path), str(NICENESS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=environment,
                bufsize=0,
            )
        except Exception as exc:  # no such file, no memory, a process limit
            self._failed(f"it could not start ({exc!r})")
            return None
        self._ready = False
        self._started = time.monotonic()
        assert self._child.stdin is not None and self._child.stdout is not None
        os.set_blocking(self._child.stdin.fileno(), False)  # writes wait with a deadline
        resize: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux's
        if resize is not None:
            with contextlib.suppress(OSError):  # over the user's pipe limits: as it is
                fcntl.fcntl(self._child.stdout.fileno(), resize, ANSWER_PIPE_BYTES)
        return self._child

    def _readied(self, child: subprocess.Popen[bytes]) -> bool:
        """Whether the process has said it is ready (read without waiting for it); a process
        that said something else, or nothing in ``START_TIMEOUT_S``, has failed."""
        assert child.stdout is not None
        if not readable(child.stdout.fileno()):
            if time.monotonic() - self._started > START_TIMEOUT_S:
                self._failed(f"it was not ready after {START_TIMEOUT_S:g} s")
            return False
        try:  # one short write: whole once readable (else not a frame of ours)
            ready = read_frame(child.stdout.fileno(), READY_READ_S)
        except Exception as exc:  # a frame cut short, or not a pickle
            ready = exc
        if isinstance(ready, Ready) and ready.version == __version__:
            self._ready = True
            return True
        self._failed(f"it did not start (it said {ready!r}; its errors are on standard error)")
        return False

    def _failed(self, what: str) -> str:
        """End the process, count a failure and say it (not once closed); the detail for a
        run span."""
        child, self._child = self._child, None
        self._ready = False
        if child is not None:
            _end(child, 0.0)
        detail = f"the conversion process failed: {what}"
        if self._closed:
            return detail
        self._failures += 1
        if self._failures >= MAX_FAILURES:
            self._give_up(f"{detail} ({self._failures} failures in a row)")
        else:
            _logger.warning("otel-ort: %s; a new one starts for the next profiled run", detail)
        return detail

    def _give_up(self, why: str) -> None:
        self.unavailable = why
        _logger.warning(
            "otel-ort: %s; profiles are converted on the profiler's worker thread from now on "
            "(which holds the GIL while it converts)",
            why,
        )

    def _forget(self) -> None:
        """In a forked child: the process is the parent's; close this copy of its pipes."""
        child, self._child = self._child, None
        self._failures = 0
        self._lock = threading.Lock()
        if child is not None:
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
            child.returncode = 0  # not this process's child: never waited for here


def _import_path() -> list[str]:
    """``sys.path``'s entries as absolute text (``''``, the current directory, as it is now;
    entries Python's import system ignores, left out)."""
    path = []
    for entry in sys.path:
        if isinstance(entry, str | bytes | os.PathLike):
            path.append(os.path.abspath(os.fsdecode(entry)))
    return path


def _end(child: subprocess.Popen[bytes], timeout: float) -> None:
    """Close the process's input, wait up to ``timeout`` for it to end, else kill it."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()

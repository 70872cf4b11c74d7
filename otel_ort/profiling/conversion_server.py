"""The conversion process's side: it converts profiled runs sent by one instrumented process.

The instrumented process starts it (:mod:`otel_ort.profiling.conversion_process`) with the
interpreter it runs on, without ``PYTHONPATH`` and the user's site directory (so no
auto-instrumentation's ``sitecustomize``), its own ``sys.path`` given on the command line.
Frames go both ways on its standard input and output (:mod:`otel_ort.profiling.frames`),
standard output moved to a descriptor of its own before any import: it says it is ready, then
answers each :class:`~otel_ort.profiling.conversion_job.ConversionJob` with a
:class:`~otel_ort.profiling.conversion_job.Converted` whose spans are encoded as OTLP, or
with a :class:`JobFailed` for a bug of otel-ort's. What it prints goes to standard error, with
the instrumented process's. It ignores ``SIGINT`` and ``SIGTERM`` from its first line: a
terminal's Ctrl-C and systemd's stop reach every process of the group, and the instrumented
process may still convert its pending profiles as it shuts down. It ends when its input
does, which the instrumented process's end, whatever its cause, brings about.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from otel_ort.profiles.spans import SpanBuilder
from otel_ort.profiling.conversion_job import ConversionJob, SpanLayout, convert_job
from otel_ort.profiling.frames import read_frame, write_frame
from otel_ort.version import __version__


@dataclass(frozen=True, slots=True)
class Ready:
    """The first frame: the process can take jobs."""

    version: str
    pid: int


@dataclass(frozen=True, slots=True)
class JobFailed:
    """``convert_job`` raised (a bug of otel-ort's): the traceback, for the run span's error."""

    detail: str


class _Builders:
    """One span builder per layout, kept: their caches carry over from run to run."""

    def __init__(self) -> None:
        self._made: dict[SpanLayout, SpanBuilder] = {}

    def get(self, layout: SpanLayout) -> SpanBuilder:
        builder = self._made.get(layout)
        if builder is None:
            limits = SpanLimits(  # UNSET: no limit (None would read the defaults)
                max_span_attributes=_or_unset(layout.max_attributes),
                max_span_attribute_length=_or_unset(layout.max_length),
            )
            provider = TracerProvider(  # for its limits and ids only: it never has a processor
                sampler=ALWAYS_ON,  # (not read from the environment: nothing to warn about)
                resource=Resource.get_empty(),
                span_limits=limits,
                shutdown_on_exit=False,
            )
            builder = SpanBuilder(provider, layout.max_node_spans, layout.max_trace_bytes)
            self._made[layout] = builder
        return builder


def _or_unset(limit: int | None) -> int:
    return SpanLimits.UNSET if limit is None else limit


def serve(jobs_fd: int, answers_fd: int) -> None:
    """Answer jobs from ``jobs_fd`` on ``answers_fd`` until ``jobs_fd`` ends (or either pipe
    breaks: the instrumented process is gone)."""
    builders = _Builders()
    try:
        write_frame(answers_fd, Ready(__version__, os.getpid()))
        while True:
            job = read_frame(jobs_fd)
            if job is None:
                return
            _answer(answers_fd, job, builders)
            del job
    except (OSError, EOFError):
        return


def _answer(answers_fd: int, job: object, builders: _Builders) -> None:
    """Convert ``job`` and write the answer: ``JobFailed`` for what raises, the answer
    included if it cannot be written as a frame (``OSError``: the pipe is gone)."""
    try:
        assert isinstance(job, ConversionJob), type(job)
        builder = builders.get(job.spans.layout) if job.spans is not None else None
        write_frame(answers_fd, convert_job(job, builder))
    except OSError:
        raise
    except Exception:
        write_frame(answers_fd, JobFailed(traceback.format_exc(limit=8)))


def main(answers_fd: int) -> None:
    """The process's entry (after its bootstrap): jobs on standard input, answers on
    ``answers_fd`` (standard output's own descriptor, now standard error's)."""
    sys.stdout = sys.stderr
    serve(0, answers_fd)

"""The conversion process's side: it converts profiled runs sent by one instrumented process.

The instrumented process starts it (:mod:`otel_ort.profiling.conversion_process`) with the
interpreter it runs on, isolated (``-I``: no ``PYTHONPATH``, so no auto-instrumentation's
``sitecustomize``), its own ``sys.path`` given on the command line. Frames go both ways on
its standard input and output (:mod:`otel_ort.profiling.frames`): it says it is ready, then
answers each :class:`~otel_ort.profiling.conversion_job.ConversionJob` with a
:class:`~otel_ort.profiling.conversion_job.Converted` whose spans are encoded as OTLP, or
with a :class:`JobFailed` for a bug of otel-ort's. What it prints goes to standard error, with
the instrumented process's. It ignores ``SIGINT`` (a terminal's Ctrl-C reaches the whole
process group: the instrumented process decides when it ends) and ends when its input does.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider

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
                resource=Resource.get_empty(), span_limits=limits, shutdown_on_exit=False
            )
            builder = SpanBuilder(provider, layout.max_node_spans, layout.max_trace_bytes)
            self._made[layout] = builder
        return builder


def _or_unset(limit: int | None) -> int:
    return SpanLimits.UNSET if limit is None else limit


def serve(jobs_fd: int, answers_fd: int) -> None:
    """Answer jobs from ``jobs_fd`` on ``answers_fd`` until ``jobs_fd`` ends."""
    builders = _Builders()
    write_frame(answers_fd, Ready(__version__, os.getpid()))
    while True:
        job = read_frame(jobs_fd)
        if job is None:
            return
        assert isinstance(job, ConversionJob)
        try:
            builder = builders.get(job.spans.layout) if job.spans is not None else None
            answer: object = convert_job(job, builder)
        except Exception:
            answer = JobFailed(traceback.format_exc(limit=8))
        write_frame(answers_fd, answer)
        del job, answer


def main() -> None:
    """The process's entry: its protocol on standard input and output."""
    answers_fd = os.dup(1)  # frames only: anything printed goes to standard error
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(0, answers_fd)

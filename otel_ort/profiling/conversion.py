"""Worker: a profiled run's profile → node and kernel spans under its run span, perf counts,
the kept (enriched) Chrome JSON, retention; then the run span ends at the time the run
ended. A failure is said on the span (``onnxruntime.profile.error``), which still ends.

The CPU-heavy part (:func:`~otel_ort.profiling.conversion_job.convert_job`) runs in the
conversion process (:mod:`~otel_ort.profiling.conversion_process`) when the spans can go
there and back as OTLP bytes: every span processor that takes profile spans is otel-ort's
(``take_encoded``) and the tracer provider makes span ids as the SDK's default does. Else,
while the process starts, or with ``profile_conversion="thread"``, it runs here, on the
worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Span, format_span_id, format_trace_id

from otel_ort import semconv
from otel_ort.export.delivery import NotSdkTracerProvider, SpanDelivery
from otel_ort.export.sdk_internals import span_limits
from otel_ort.failures import report_failure
from otel_ort.perf.counting import PerfCounters, RawRun, SettledRun
from otel_ort.profiles.reader import ProfileError
from otel_ort.profiles.spans import DEFAULT_MAX_TRACE_BYTES, PROFILE_SCOPE, SpanBuilder
from otel_ort.profiling.conversion_job import (
    ENCODINGS,
    ConversionJob,
    Converted,
    SpanJob,
    SpanLayout,
    convert_job,
)
from otel_ort.profiling.conversion_process import ConversionProcess, Lost
from otel_ort.profiling.profiled_call import ProfiledRun
from otel_ort.profiling.session_runs import SessionRuns
from otel_ort.profiling.store import ProfileStore, remove_files, temporary_path
from otel_ort.version import __version__

MAX_DETAIL = 512
Count = Callable[[str, int], None]
"""Adds to one of the profiler's counts (and its metric)."""


class _Destination:
    """Where one tracer provider's profile spans go: its span processors (``delivery``) and a
    builder for the spans made on the worker thread."""

    def __init__(self, provider: Any, max_trace_bytes: int) -> None:
        self.provider = provider
        self.delivery = SpanDelivery(provider)  # first: it refuses a provider not the SDK's
        self.builder = SpanBuilder(provider, max_trace_bytes=max_trace_bytes)
        limits = span_limits(provider)
        self.layout = SpanLayout(
            limits.max_span_attributes, limits.max_span_attribute_length, max_trace_bytes
        )
        self.default_ids = type(provider.id_generator) is RandomIdGenerator
        """Span ids as the SDK makes them by default: the conversion process can make them."""


class Converter:
    """Converts profiled runs, one at a time, on the profiler's worker."""

    def __init__(
        self,
        perf: PerfCounters | None,
        provider: Callable[[], Any],
        count: Count,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
        process: ConversionProcess | None = None,
    ) -> None:
        """``process``: where conversions run when they can (``None``: on the worker)."""
        self._perf = perf
        self._provider = provider
        self._count = count
        self.max_trace_bytes = max_trace_bytes
        """The byte budget of a run's node and kernel spans (``profile_max_trace_bytes``)."""
        self.process = process
        self._destination: _Destination | None = None

    def convert(
        self,
        store: ProfileStore,
        span: Span,
        end_ns: int,
        run: ProfiledRun,
        session_facts: Any,
        runs: SessionRuns,
    ) -> None:
        """The run's spans and kept file; the run span ends whatever happens, a problem is
        counted (``profile_error``) and said on it, ORT's raw file never stays behind."""
        self._count("profiled", 1)
        problems: list[str] = []
        if isinstance(run.counters, RawRun):  # first, or the pool's next run will have to
            run.counters.settle()  # (never raises: what it cannot read becomes a problem)
        written = store.written(run.files)  # ORT's files for the run (normally one)
        try:
            self._keep_profile(store, span, run, written, session_facts, runs, problems)
        except Exception as exc:
            problems.append(f"keeping the profile failed: {exc!r}")
            report_failure("could not keep a profiled run's profile")
        finally:
            remove_files(written)
            if problems:
                self._count(semconv.PROFILE_ERROR_OUTCOME, 1)
            end_span(span, end_ns, "; ".join(problems))

    def close(self) -> None:
        """End the conversion process (the worker has stopped)."""
        if self.process is not None:
            self.process.close()

    def _keep_profile(
        self,
        store: ProfileStore,
        span: Span,
        run: ProfiledRun,
        written: list[str],
        session_facts: Any,
        runs: SessionRuns,
        problems: list[str],
    ) -> None:
        """Spans, kept file, retention; what went wrong goes to ``problems``."""
        if not written:
            none = ProfileError(run.files.prefix, "ONNX Runtime wrote no profile file for this run")
            problems.append(str(none))
            return
        destination = self._destination_for(span, problems)
        spans = None
        if destination is not None:
            context = span.get_span_context()
            spans = SpanJob(context.trace_id, context.span_id, destination.layout)
        counted = self._perf_counts(span, run.counters, problems)
        job = ConversionJob(
            written[-1],
            run.start_ns,
            counted,
            spans,
            _other_data(span, session_facts),
            run.thread,
            os.getpid(),
            run.files.path,
        )
        done = self._converted(job, destination)
        remove_files(written)  # now, not after delivery, which may wait on the export queue
        written.clear()
        if isinstance(done, Lost):  # the process may have written the kept file, or begun to
            problems.append(done.detail)
            remove_files([temporary_path(run.files.path)])
            self._retain(store, run, None, problems)
            return
        problems += done.problems
        for failure in done.failures:
            report_failure(failure.what, failure.traceback)
        if not done.read:
            return
        if done.nodes is not None:
            runs.nodes = max(1, done.nodes)
        if done.perf_attributes and span.is_recording():
            span.set_attributes(done.perf_attributes)
        if done.kept_size is not None:
            self._retain(store, run, done.kept_size, problems)
        if destination is not None and done.summary:
            self._deliver(span, destination, done)

    def _destination_for(self, span: Span, problems: list[str]) -> _Destination | None:
        """Where the run's node spans go; ``None``: they are not made (the run span is not
        recording, or the provider cannot take finished spans: said in ``problems``)."""
        if not span.is_recording():
            return None
        provider = self._provider()
        if self._destination is None or self._destination.provider is not provider:
            try:
                self._destination = _Destination(provider, self.max_trace_bytes)
            except NotSdkTracerProvider as exc:  # no node spans; the file is still kept
                problems.append(f"{exc}; the Chrome JSON is still kept")
                return None
        return self._destination

    def _converted(self, job: ConversionJob, destination: _Destination | None) -> Converted | Lost:
        """``job`` done in the conversion process when its spans can come back encoded, else
        here."""
        if self.process is not None:
            encodings: tuple[str, ...] | None = None
            if destination is None:
                encodings = ()
            elif destination.default_ids:
                encodings = destination.delivery.encodings()
                if encodings is not None and not set(encodings) <= set(ENCODINGS):
                    encodings = None  # an encoding the process does not write
            if encodings is not None:
                spans = job.spans and replace(job.spans, encodings=encodings)
                done = self.process.convert(replace(job, spans=spans))
                if done is not None:
                    return done
        return convert_job(job, destination.builder if destination is not None else None)

    def _deliver(self, span: Span, destination: _Destination, done: Converted) -> None:
        """Hand the node spans to the provider's span processors; the run summary on ``span``."""
        if done.drafts is not None:
            dropped = destination.delivery.deliver_drafts(done.drafts)
        else:
            resource = destination.provider.resource
            dropped = destination.delivery.deliver_encoded(resource, PROFILE_SCOPE, done.encoded)
        span.set_attributes(done.summary)
        if dropped:
            span.set_attribute(semconv.PROFILE_SPANS_DROPPED, dropped)
            self._count("spans_dropped", dropped)

    def _retain(
        self, store: ProfileStore, run: ProfiledRun, size: int | None, problems: list[str]
    ) -> None:
        """Retention, with the run's kept file of ``size`` bytes counted (``None``: if it
        exists); a failure goes to ``problems``."""
        try:
            deleted = store.retain(run.files.path, size)
        except Exception as exc:
            problems.append(f"keeping the profile failed: {exc!r}")
            report_failure("could not keep a profiled run's profile")
            return
        if deleted:
            self._count("files_deleted", deleted)

    def _perf_counts(
        self, span: Span, counters: RawRun | str | None, problems: list[str]
    ) -> SettledRun | None:
        """The run's perf records, settled, for attribution; why it was not counted goes on
        the run span."""
        if counters is None:
            return None
        assert self._perf is not None
        if isinstance(counters, str):
            if span.is_recording():
                span.set_attribute(
                    semconv.PERF_UNAVAILABLE, [*self._perf.unavailable_events, counters]
                )
            return None
        try:
            return self._perf.settled(counters)
        except Exception as exc:
            problems.append(f"attributing perf counts failed: {exc!r}")
            report_failure("could not attribute perf counts")
            return None


def _other_data(span: Span, session_facts: Any) -> dict[str, Any]:
    """The kept file's ``otherData``: the session, the model, and the run span's ids."""
    context = span.get_span_context()
    other_data = {
        "session_id": session_facts.session_id,
        "model": session_facts.run_attributes.get(semconv.MODEL_PATH, "unknown"),
        "otel_ort_version": __version__,
    }
    if context.is_valid:  # not without an SDK tracer provider: no trace to point to
        other_data["trace_id"] = format_trace_id(context.trace_id)
        other_data["span_id"] = format_span_id(context.span_id)
    return other_data


def end_span(span: Span, end_ns: int, problem: str) -> None:
    """End a profiled run's span, saying what went wrong with its profile (if anything)."""
    if problem and span.is_recording():
        span.set_attribute(semconv.PROFILE_ERROR, problem[:MAX_DETAIL])
    span.end(end_ns)

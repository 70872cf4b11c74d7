"""Worker: a profiled run's profile → node and kernel spans under its run span, perf counts,
the kept (enriched) Chrome JSON, retention; then the run span ends at the time the run
ended. A failure is said on the span (``onnxruntime.profile.error``), which still ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span, format_span_id, format_trace_id

from otel_ort import semconv
from otel_ort._util.gc_pause import gc_paused
from otel_ort.export.delivery import NotSdkTracerProvider, SpanDelivery
from otel_ort.failures import report_failure
from otel_ort.perf.counting import PerfCounters, RawRun
from otel_ort.perf.report import ProfileCounts, count_profile
from otel_ort.profiles.reader import ProfileError
from otel_ort.profiles.records import Profile
from otel_ort.profiles.span_draft import SpanDraft
from otel_ort.profiles.spans import DEFAULT_MAX_TRACE_BYTES, SpanBuilder
from otel_ort.profiling.kept import publish_run, read_run
from otel_ort.profiling.profiled_call import ProfiledRun
from otel_ort.profiling.session_runs import SessionRuns
from otel_ort.profiling.store import ProfileStore, remove_files
from otel_ort.version import __version__

MAX_DETAIL = 512
Count = Callable[[str, int], None]
"""Adds to one of the profiler's counts (and its metric)."""


class Converter:
    """Converts profiled runs, one at a time, on the profiler's worker."""

    def __init__(
        self,
        perf: PerfCounters | None,
        provider: Callable[[], Any],
        count: Count,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    ) -> None:
        self._perf = perf
        self._provider = provider
        self._count = count
        self.max_trace_bytes = max_trace_bytes
        """The byte budget of a run's node and kernel spans (``profile_max_trace_bytes``)."""
        self._delivery: tuple[object, SpanBuilder, SpanDelivery] | None = None

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
        try:
            self._keep_profile(store, span, run, session_facts, runs, problems)
        except Exception as exc:
            problems.append(f"keeping the profile failed: {exc!r}")
            report_failure("could not keep a profiled run's profile")
        finally:
            remove_files(store.written(run.files))
            if problems:
                self._count(semconv.PROFILE_ERROR_OUTCOME, 1)
            end_span(span, end_ns, "; ".join(problems))

    def _keep_profile(
        self,
        store: ProfileStore,
        span: Span,
        run: ProfiledRun,
        session_facts: Any,
        runs: SessionRuns,
        problems: list[str],
    ) -> None:
        """Spans, enriched file, retention; what went wrong goes to ``problems``.

        The cyclic garbage collector is paused while the profile is read, counted, made into
        span drafts and written as the kept file: the collections the profile's tens of
        thousands of acyclic objects would trigger, and the full ones they would lead to, cost
        more than the work (measured 2026-11-26, a 415-node model: 6.1 ms of the worker's CPU
        a run, 2.6 ms with these pauses). The parsed events are freed before the collector is
        back, so that its first collection sees only the drafts. The drafts are delivered
        after the pause: delivery may wait for room in an export queue as long as an export
        takes, and a kept file that could not be written does not cost the run its spans."""
        built = None
        with gc_paused():
            try:
                profile = read_run(store, run.files, run.start_ns)
            except ProfileError as exc:
                problems.append(str(exc))
                return
            if profile.runs:
                runs.nodes = max(1, len(profile.runs[0].nodes))
            counts = None
            if run.counters is not None and profile.runs:
                counts = self._perf_counts(span, profile, run.counters, problems)
            node_counts = counts.nodes if counts is not None else []
            if span.is_recording() and profile.runs:
                try:
                    built = self._build(profile, span, node_counts)
                except NotSdkTracerProvider as exc:  # no node spans; the file is still kept
                    problems.append(f"{exc}; the Chrome JSON is still kept")
            del node_counts
            self._publish(store, span, run, session_facts, profile, counts, problems)
            del profile, counts  # freed before the collector is back
        if built is not None:
            delivery, drafts, summary = built
            dropped = delivery.deliver_drafts(drafts)
            del drafts, built
            span.set_attributes(summary)
            if dropped:
                span.set_attribute(semconv.PROFILE_SPANS_DROPPED, dropped)
                self._count("spans_dropped", dropped)

    def _publish(
        self,
        store: ProfileStore,
        span: Span,
        run: ProfiledRun,
        session_facts: Any,
        profile: Profile,
        counts: ProfileCounts | None,
        problems: list[str],
    ) -> None:
        """The kept file (with the perf counter tracks) and retention; a failure goes to
        ``problems``."""
        context = span.get_span_context()
        other_data = {
            "session_id": session_facts.session_id,
            "model": session_facts.run_attributes.get(semconv.MODEL_PATH, "unknown"),
            "otel_ort_version": __version__,
        }
        if context.is_valid:  # not without an SDK tracer provider: no trace to point to
            other_data["trace_id"] = format_trace_id(context.trace_id)
            other_data["span_id"] = format_span_id(context.span_id)
        try:
            tracks = counts.track_text() if counts is not None else None
            deleted = publish_run(store, run.files, profile, other_data, run.thread, tracks)
        except Exception as exc:
            problems.append(f"keeping the profile failed: {exc!r}")
            report_failure("could not keep a profiled run's profile")
            return
        if deleted:
            self._count("files_deleted", deleted)

    def _perf_counts(
        self, span: Span, profile: Profile, counters: RawRun | str, problems: list[str]
    ) -> ProfileCounts | None:
        """perf counts: totals on the run span; the node spans' attributes (in node order)
        and the counter tracks for the kept file."""
        assert self._perf is not None
        if isinstance(counters, str):
            if span.is_recording():
                span.set_attribute(
                    semconv.PERF_UNAVAILABLE, [*self._perf.unavailable_events, counters]
                )
            return None
        try:
            counts = count_profile(self._perf, profile, counters)
        except Exception as exc:
            problems.append(f"attributing perf counts failed: {exc!r}")
            report_failure("could not attribute perf counts")
            return None
        if span.is_recording():
            span.set_attributes(counts.run)
        return counts

    def _build(
        self, profile: Any, span: Span, node_counts: list[dict[str, Any]]
    ) -> tuple[SpanDelivery, list[SpanDraft], dict[str, Any]]:
        """Node and kernel span drafts under the live run span, where they go, and the run
        summary."""
        provider = self._provider()
        if self._delivery is None or self._delivery[0] is not provider:
            delivery = SpanDelivery(provider)  # first: it refuses a provider not the SDK's
            builder = SpanBuilder(provider, max_trace_bytes=self.max_trace_bytes)
            self._delivery = (provider, builder, delivery)
        _, builder, delivery = self._delivery
        context = span.get_span_context()
        drafts, summary = builder.node_drafts(
            profile, profile.runs[0], context.trace_id, context.span_id, node_counts
        )
        return delivery, drafts, summary


def end_span(span: Span, end_ns: int, problem: str) -> None:
    """End a profiled run's span, saying what went wrong with its profile (if anything)."""
    if problem and span.is_recording():
        span.set_attribute(semconv.PROFILE_ERROR, problem[:MAX_DETAIL])
    span.end(end_ns)

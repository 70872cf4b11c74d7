"""The CPU-heavy part of converting one profiled run, as a job that runs wherever it is sent.

A :class:`ConversionJob` holds plain, picklable data: where ORT's file is, when the run
started, its settled perf records, where its node spans go and where its kept file goes.
:func:`convert_job` reads the file, attributes the counts, builds the node and kernel spans,
writes the kept file, and gives back a :class:`Converted`. It runs in the conversion process
(:mod:`otel_ort.profiling.conversion_server`), which hands the spans back encoded as OTLP,
or on the worker thread itself, which keeps them as drafts for any span processor. It
touches no span or tracer provider, and no file but ORT's, which it only reads, and the kept
file, which it writes: the worker applies the result, deletes ORT's file and applies
retention (:mod:`otel_ort.profiling.conversion`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from traceback import format_exc
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_ort._util.gc_pause import gc_paused
from otel_ort.export.otlp_encoding import JsonSpans, ProtobufSpans
from otel_ort.perf.counting import SettledRun
from otel_ort.perf.report import ProfileCounts, count_profile
from otel_ort.profiles.reader import ProfileError, read_profile
from otel_ort.profiles.records import Profile
from otel_ort.profiles.span_draft import SpanDraft
from otel_ort.profiles.spans import DEFAULT_MAX_NODE_SPANS, SpanBuilder
from otel_ort.profiling.kept import kept_bytes, publish_kept

ENCODINGS: dict[str, type[ProtobufSpans] | type[JsonSpans]] = {
    "protobuf": ProtobufSpans,
    "json": JsonSpans,
}
"""The OTLP encodings the conversion process writes spans in, by name."""


@dataclass(frozen=True, slots=True)
class SpanLayout:
    """How a run's node spans are built: what the tracer provider's limits and otel-ort's
    options say (the same layout is the same builder, whose caches carry over)."""

    max_attributes: int | None
    max_length: int | None
    max_trace_bytes: int
    max_node_spans: int = DEFAULT_MAX_NODE_SPANS


@dataclass(frozen=True, slots=True)
class SpanJob:
    """The node spans to build: under span ``parent_id`` of trace ``trace_id``;
    ``encodings``: the OTLP encodings to hand them back in (``None``: as drafts; empty: not
    at all, only the run's summary, for a provider whose processors take none)."""

    trace_id: int
    parent_id: int
    layout: SpanLayout
    encodings: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConversionJob:
    """One profiled run to convert."""

    path: str
    """ORT's profile file (read, never deleted here)."""
    start_ns: int
    counted: SettledRun | None
    """Its perf records (``None``: not counted)."""
    spans: SpanJob | None
    """``None``: no node spans (the run span is not recording, or the provider cannot take
    finished spans)."""
    other_data: Mapping[str, Any]
    """The kept file's ``otherData``, with the trace and span ids."""
    thread: tuple[int, str]
    """The OS id and name of the thread that ran it."""
    pid: int
    kept_path: str
    """Where the kept file is written (its store's name for this run)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A failure inside a conversion, for the worker to report (``report_failure``): what
    failed and its traceback."""

    what: str
    traceback: str


@dataclass(slots=True)
class Converted:
    """What a conversion made, for the worker to apply."""

    nodes: int | None = None
    """The run's nodes (``None``: the profile held no run)."""
    problems: list[str] = field(default_factory=list)
    read: bool = False
    """The profile could be read (else ``problems`` says why, and nothing else was made)."""
    perf_attributes: dict[str, AttributeValue] = field(default_factory=dict)
    """The run span's perf totals."""
    summary: dict[str, AttributeValue] = field(default_factory=dict)
    """The run span's account of its nodes."""
    drafts: list[SpanDraft] | None = None
    """The node and kernel spans, as drafts (a job whose ``encodings`` are ``None``)."""
    encoded: dict[str, list[bytes]] = field(default_factory=dict)
    """The same spans, encoded, by encoding name (a job with ``encodings``)."""
    kept_size: int | None = None
    """The bytes of the kept file written at the job's ``kept_path`` (``None``: none was
    written)."""
    failures: list[Failure] = field(default_factory=list)
    """Failures of otel-ort's code (also in ``problems``), with their tracebacks."""


def convert_job(job: ConversionJob, builder: SpanBuilder | None) -> Converted:
    """Do ``job``; ``builder``: the node spans' builder (``None`` when ``job.spans`` is).
    Failures become ``problems`` (and ``failures``, for the worker to report); what else it
    raises is a bug (the conversion process answers it with ``JobFailed``).

    The cyclic garbage collector is paused throughout: the collections the profile's tens of
    thousands of acyclic objects would trigger, and the full ones they would lead to, cost
    more than the work (measured 2026-11-26, a 415-node model: 6.1 ms of CPU a run, 2.6 ms
    with the pause)."""
    done = Converted()
    with gc_paused():
        try:
            profile = read_profile(job.path, job.start_ns)
        except ProfileError as exc:
            done.problems.append(str(exc))
            return done
        done.read = True
        if profile.runs:
            done.nodes = len(profile.runs[0].nodes)
        counts = None
        if job.counted is not None and profile.runs:
            counts = _counts(job.counted, profile, done)
        if job.spans is not None and builder is not None and profile.runs:
            node_counts = counts.nodes if counts is not None else []
            drafts, done.summary = builder.node_drafts(
                profile, profile.runs[0], job.spans.trace_id, job.spans.parent_id, node_counts
            )
            encodings = job.spans.encodings
            if encodings is None:
                done.drafts = drafts
            else:
                done.encoded = {name: _encoder(name).spans(drafts) for name in encodings}
            del drafts, node_counts
        try:
            tracks = counts.track_text() if counts is not None else None
            kept = kept_bytes(profile, job.other_data, job.thread, job.pid, tracks)
            done.kept_size = publish_kept(kept, job.kept_path)
        except Exception as exc:
            done.problems.append(f"keeping the profile failed: {exc!r}")
            done.failures.append(Failure("could not keep a profiled run's profile", format_exc()))
        del profile, counts  # freed before the collector is back
    return done


_encoders: dict[str, ProtobufSpans | JsonSpans] = {}


def _encoder(name: str) -> ProtobufSpans | JsonSpans:
    """The encoding ``name``'s encoder, made once (it caches what repeats)."""
    encoder = _encoders.get(name)
    if encoder is None:
        encoder = _encoders[name] = ENCODINGS[name]()
    return encoder


def _counts(counted: SettledRun, profile: Profile, done: Converted) -> ProfileCounts | None:
    """The run's perf counts, their totals in ``done``; a failure goes to its problems."""
    try:
        counts = count_profile(counted, profile)
    except Exception as exc:
        done.problems.append(f"attributing perf counts failed: {exc!r}")
        done.failures.append(Failure("could not attribute perf counts", format_exc()))
        return None
    done.perf_attributes = counts.run
    return counts

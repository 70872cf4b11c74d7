"""A read profile → finished spans: run → node → kernel, built directly as span drafts.

The SDK's ``start_span``/``end`` costs tens of microseconds per span (sampler, context, attribute
validation, locks); a profile of thousands of nodes would cost a second of CPU. Profile spans are
already finished when they are known, so they are built here as
:class:`~otel_ort.profiles.span_draft.SpanDraft` objects with the TracerProvider's resource, ids
from its id generator, and attributes that are valid by construction.
:mod:`otel_ort.export.delivery` hands them to its span processors: otel-ort's OTLP processors
encode them straight to bytes (:mod:`otel_ort.export.otlp_encoding`), the others get
``ReadableSpan``s. Span processors' ``on_start`` is not called for them.

The provider's span limits apply (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``,
``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``), as to its own spans; names from the profile are clipped
to :data:`otel_ort._util.text_limits.MAX_TEXT` characters whatever they say.

A node that a control-flow node (Loop, If, Scan) runs inside its window is its child span,
not its sibling. Time: absolute ns = ``profile.start_ns`` + ``ts`` µs. A node span covers its
Node event, the spans under it and any kernels linked to it (GPU kernels may finish after
the launching node's CPU window; the node's own duration stays in
``onnxruntime.node.duration_us``); a run span covers all its children. So every child lies
inside its parent.

Per run, at most ``max_node_spans`` node and kernel spans, and at most ``max_trace_bytes``
bytes of them as OTLP protobuf (each span's exact encoded size, framing included): the
longest nodes are kept with their kernels, then the longest unmatched kernels, while both
limits allow (after 8 nodes in a row over the byte budget, the rest are not tried); the
other nodes are summarised per op type on the run span
(``onnxruntime.run.not_emitted.*``), the kernels left out counted
(``onnxruntime.run.kernels_not_emitted``), and the limit that left spans out first named
(``onnxruntime.run.not_emitted.limit``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort._util.gc_pause import gc_paused
from otel_ort._util.text_limits import MAX_TEXT, clip
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.sdk_internals import span_limits
from otel_ort.profiles.node_attributes import int_value, node_attributes
from otel_ort.profiles.node_encoding import DraftKit, NodeEncoder
from otel_ort.profiles.records import KernelRecord, NodeRecord, Profile, RunRecord, holders
from otel_ort.profiles.span_draft import DeferredAttributes, SpanDraft
from otel_ort.version import __version__

DEFAULT_MAX_NODE_SPANS = 10_000
"""Jaeger's UI slows down near 40k spans per trace and its default query returns 10k."""
DEFAULT_MAX_TRACE_BYTES = 4_000_000
"""Grafana Tempo refuses traces over 5,000,000 bytes by default (``max_bytes_per_trace``):
this leaves a megabyte for the run span, the request's own spans and the requests' framing."""

PROFILE_SCOPE_NAME = "otel_ort.profile"
"""The instrumentation scope of node and kernel spans (export pipelines route by it)."""
PROFILE_SCOPE = InstrumentationScope(PROFILE_SCOPE_NAME, __version__)
_UNIQUE_KEYS = (semconv.NODE_NAME, semconv.NODE_INDEX, semconv.NODE_DURATION_US)
"""Attributes whose values rarely repeat: not worth caching their encoding."""
_LIMIT_SPANS, _LIMIT_BYTES = "max_node_spans", "max_trace_bytes"


class SpanBuilder:
    """Builds span trees from profiles for one TracerProvider."""

    def __init__(
        self,
        tracer_provider: TracerProvider,
        max_node_spans: int = DEFAULT_MAX_NODE_SPANS,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    ) -> None:
        if max_node_spans < 0:
            raise ValueError(f"max_node_spans must be >= 0, got {max_node_spans}")
        if max_trace_bytes < 0:
            raise ValueError(f"max_trace_bytes must be >= 0, got {max_trace_bytes}")
        self._resource = tracer_provider.resource
        self._ids = tracer_provider.id_generator
        limits = span_limits(tracer_provider)
        self._max_attributes = limits.max_span_attributes
        self._max_length = limits.max_span_attribute_length
        self.max_node_spans = max_node_spans
        self.max_trace_bytes = max_trace_bytes
        self._encoder = ProtobufSpans(_UNIQUE_KEYS)
        self._nodes = NodeEncoder()
        self._kit: DraftKit = (
            SpanDraft, DeferredAttributes, node_attributes, self._resource, PROFILE_SCOPE, MAX_TEXT
        )  # fmt: skip

    def run_drafts(
        self,
        profile: Profile,
        run: RunRecord,
        parent: SpanContext | None = None,
        run_extra: Mapping[str, AttributeValue] | None = None,
        node_extra: Sequence[Mapping[str, AttributeValue]] = (),
        link: SpanContext | None = None,
    ) -> list[SpanDraft]:
        """A run span (child of ``parent``, else the root of a new trace) and its subtree;
        children first, the run span last. ``run_extra``, ``node_extra``: more attributes
        for the run span and per node (as in :meth:`node_drafts`), such as perf counts;
        ``link``: a span the run span links to."""
        trace_id = parent.trace_id if parent is not None else self._ids.generate_trace_id()
        run_id = self._ids.generate_span_id()
        drafts, summary = self.node_drafts(profile, run, trace_id, run_id, node_extra)
        base = profile.start_ns
        start = min([base + int(run.ts * 1000)] + [draft.start for draft in drafts])
        end = max([base + int(run.end * 1000)] + [draft.end for draft in drafts])
        run_attributes: dict[str, AttributeValue] = {
            semconv.RUN_PROFILED: True,
            semconv.PROFILE_FILE: profile.path,
            semconv.PROFILE_START_SOURCE: profile.start_source,
            semconv.RUN_INDEX: run.index,
            **summary,
            **(run_extra or {}),
        }
        if profile.truncated:
            run_attributes[semconv.PROFILE_TRUNCATED] = True
        if not run.complete:
            run_attributes[semconv.RUN_COMPLETE] = False
        run_draft = self._draft(
            semconv.SPAN_RUN,
            trace_id,
            parent.span_id if parent is not None else 0,
            run_attributes,
            start,
            end,
        )
        run_draft.span_id = run_id
        run_draft.parent_remote = parent is not None and parent.is_remote
        if link is not None:
            run_draft.links = (Link(link),)
        drafts.append(run_draft)
        return drafts

    def node_drafts(
        self,
        profile: Profile,
        run: RunRecord,
        trace_id: int,
        parent_id: int,
        extra: Sequence[Mapping[str, AttributeValue]] = (),
    ) -> tuple[list[SpanDraft], dict[str, AttributeValue]]:
        """Node and kernel spans under the span ``parent_id`` of trace ``trace_id``, and the
        run-level summary attributes. ``extra``: more attributes per node (in ``run.nodes``
        order), such as perf counts."""
        with gc_paused():
            return self._node_drafts(profile, run, trace_id, parent_id, extra)

    def _node_drafts(
        self,
        profile: Profile,
        run: RunRecord,
        trace_id: int,
        parent_id: int,
        extra: Sequence[Mapping[str, AttributeValue]],
    ) -> tuple[list[SpanDraft], dict[str, AttributeValue]]:
        nodes = run.nodes
        base = profile.start_ns
        measure = self._encoder.measure
        unmatched = [
            self._kernel_draft(kernel, trace_id, parent_id, base, True)
            for kernel in run.unmatched_kernels
        ]
        unmatched_sizes = [measure(kernel) for kernel in unmatched]
        made: dict[int, SpanDraft] = {}  # by node
        kernels_of: dict[int, list[SpanDraft]] = {}  # by node, for nodes with kernels

        place = (base, trace_id, parent_id)
        in_c = self._max_length is None  # (span limits' value lengths: the dict path's)
        drafted = self._nodes.draft

        def node_size(at: int) -> int:
            node_extra = extra[at] if at < len(extra) else None
            one = (
                drafted(nodes[at], node_extra, self._max_attributes, place, self._kit)
                if in_c
                else None
            )
            if one is not None:  # in C: a node without kernels, its attributes encoded
                made[at] = one[0]
                return one[1]
            draft, kernels, size = self._measured(nodes[at], base, trace_id, parent_id, node_extra)
            made[at] = draft
            if kernels:
                kernels_of[at] = kernels
            return size

        selection = self._select(nodes, node_size, run.unmatched_kernels, unmatched_sizes)
        shown_unmatched = [unmatched[at] for at in selection.unmatched]
        emitted = selection.nodes
        new_id = self._ids.generate_span_id
        ids = {at: new_id() for at in emitted}
        held_by = _emitted_holders(holders(nodes), ids)
        drafts: list[SpanDraft] = []
        for at in emitted:
            draft = made[at]
            kernels = kernels_of.get(at, ())
            draft.span_id = ids[at]
            for kernel in kernels:
                kernel.span_id, kernel.parent_id = new_id(), draft.span_id
                drafts.append(kernel)
                draft.start = min(draft.start, kernel.start)
                draft.end = max(draft.end, kernel.end)
        held = [at for at in emitted if held_by[at] is not None]  # none without control flow
        for at in sorted(held, key=lambda at: -_depth(at, held_by)):  # innermost first
            holder = held_by[at]
            assert holder is not None
            inner, holding = made[at], made[holder]  # a holder's span holds its nodes'
            holding.start = min(holding.start, inner.start)
            holding.end = max(holding.end, inner.end)
        for at in emitted:
            holder = held_by[at]
            draft = made[at]
            draft.parent_id = parent_id if holder is None else ids[holder]
            drafts.append(draft)
        for kernel in shown_unmatched:
            kernel.span_id = new_id()
            drafts.append(kernel)
        summary = _summary(run, selection)
        return drafts, summary

    def _measured(
        self,
        node: NodeRecord,
        base: int,
        trace_id: int,
        parent_id: int,
        node_extra: Mapping[str, AttributeValue] | None,
    ) -> tuple[SpanDraft, list[SpanDraft], int]:
        """A node's draft, its kernels' drafts, and their encoded size together. Its
        attributes are encoded from its args (:mod:`otel_ort.profiles.node_encoding`) and
        made as a dict only if read, unless span limits may cut them."""
        measure = self._encoder.measure
        start, end = base + int(node.ts * 1000), base + int(node.end * 1000)
        parts = None
        if self._max_length is None:
            parts = self._nodes.parts(node, node_extra, self._max_attributes)
        if parts is not None:
            attributes = DeferredAttributes(node_attributes, node, node_extra)
            draft = SpanDraft(
                trace_id, 0, parent_id, clip(node.name), start, end, attributes, self._resource,
                PROFILE_SCOPE,
            )  # fmt: skip
            draft.encoded = parts
            size = self._encoder.measure_parts(parts, parent_id, start, end)
        else:
            draft = self._draft(
                clip(node.name), trace_id, parent_id, node_attributes(node, node_extra),
                start, end,
            )  # fmt: skip
            size = measure(draft)
        kernels: list[SpanDraft] = []
        if node.kernels:
            kernels = [
                self._kernel_draft(k, trace_id, _PLACEHOLDER, base, False) for k in node.kernels
            ]
            size += sum(measure(kernel) for kernel in kernels)
        return draft, kernels, size

    def _select(
        self,
        nodes: list[NodeRecord],
        node_size: Callable[[int], int],
        unmatched: list[KernelRecord],
        unmatched_sizes: list[int],
    ) -> _Selection:
        """Which nodes get spans (their indexes, in order), with their kernels, and which
        unmatched kernels. The nodes are taken longest first, each while both the span count
        and the byte budget left allow it; a node that does not fit is passed over. A node
        is encoded (``node_size``) only if it could fit: after ``_MISSES_TO_STOP`` nodes in a
        row whose bytes did not fit, the rest are left out unencoded. Then the longest
        unmatched kernels fill what is left."""
        spans_left, bytes_left = self.max_node_spans, self.max_trace_bytes
        limit = ""
        kept: list[int] = []
        left_out: list[int] = []
        misses = 0
        order = sorted(range(len(nodes)), key=lambda at: -nodes[at].dur)
        for position, at in enumerate(order):
            cost = 1 + len(nodes[at].kernels)
            if cost > spans_left:
                limit = limit or _LIMIT_SPANS
                left_out.append(at)
                continue
            size = node_size(at) if cost * _MIN_SPAN_BYTES <= bytes_left else None
            if size is None or size > bytes_left:
                limit = limit or _LIMIT_BYTES
                left_out.append(at)
                misses += 1
                if misses == _MISSES_TO_STOP:  # the budget is spent: the rest stay unencoded
                    left_out += order[position + 1 :]
                    break
                continue
            misses = 0
            kept.append(at)
            spans_left, bytes_left = spans_left - cost, bytes_left - size
        shown: list[int] = []
        for at in sorted(range(len(unmatched)), key=lambda at: -unmatched[at].dur):
            if spans_left >= 1 and unmatched_sizes[at] <= bytes_left:
                shown.append(at)
                spans_left, bytes_left = spans_left - 1, bytes_left - unmatched_sizes[at]
            elif not limit:
                limit = _LIMIT_SPANS if spans_left < 1 else _LIMIT_BYTES
        kept.sort()
        left_out.sort()
        shown.sort()
        return _Selection(kept, left_out, shown, limit, self.max_trace_bytes - bytes_left)

    def _kernel_draft(
        self, kernel: KernelRecord, trace_id: int, parent_id: int, base: int, unmatched: bool
    ) -> SpanDraft:
        """A kernel's span: under ``parent_id``, the run's span for a kernel no node claims
        (else a placeholder until its node's span has an id)."""
        attributes = _kernel_attributes(kernel)
        if unmatched:
            attributes[semconv.KERNEL_UNMATCHED] = True
        start = base + int(kernel.ts * 1000)
        end = start + int(kernel.dur * 1000)
        return self._draft(clip(kernel.name), trace_id, parent_id, attributes, start, end)

    def _draft(
        self,
        name: str,
        trace_id: int,
        parent_id: int,
        attributes: dict[str, AttributeValue],
        start: int,
        end: int,
    ) -> SpanDraft:
        """A span with the provider's span limits applied, as the SDK applies them; its span
        id (and a matched kernel's parent, a placeholder until then) is set once it is
        chosen."""
        limit = self._max_attributes
        dropped = 0
        limited: Mapping[str, AttributeValue] = attributes
        if self._max_length is not None or (limit is not None and len(attributes) > limit):
            limited = BoundedAttributes(
                limit, attributes, immutable=True, max_value_len=self._max_length
            )
            dropped = limited.dropped
        return SpanDraft(
            trace_id,
            0,
            parent_id,
            name,
            start,
            end,
            limited,
            self._resource,
            PROFILE_SCOPE,
            dropped,
        )


_PLACEHOLDER = 1
_MIN_SPAN_BYTES = 46
"""Fewer bytes than any span encodes to: its trace id (18 with its tag), span id (10), start
and end (9 each) are always there. A node whose spans need more than the budget left is
passed over without being encoded."""
_MISSES_TO_STOP = 8
"""Nodes in a row whose bytes did not fit, after which the budget counts as spent."""
"""A parent span id for measuring (every node and kernel span has a parent)."""


class _Selection:
    """What :meth:`SpanBuilder._select` chose."""

    __slots__ = ("emitted_bytes", "left_out", "limit", "nodes", "unmatched")

    def __init__(
        self, nodes: list[int], left_out: list[int], unmatched: list[int], limit: str, size: int
    ) -> None:
        self.nodes = nodes
        self.left_out = left_out
        self.unmatched = unmatched
        self.limit = limit
        """The limit that left a span out first (``""``: none was left out)."""
        self.emitted_bytes = size


def _summary(run: RunRecord, selection: _Selection) -> dict[str, AttributeValue]:
    """The run span's account of its nodes and of what was left out."""
    nodes, left_out = run.nodes, selection.left_out
    summary: dict[str, AttributeValue] = {
        semconv.RUN_NODE_COUNT: len(nodes),
        semconv.RUN_NODES_NOT_EMITTED: len(left_out),
    }
    if run.unmatched_kernels:
        summary[semconv.RUN_UNMATCHED_KERNELS] = len(run.unmatched_kernels)
    if left_out:
        summary.update(_left_out_summary([nodes[at] for at in left_out]))
    kernels = sum(len(nodes[at].kernels) for at in left_out)
    kernels += len(run.unmatched_kernels) - len(selection.unmatched)
    if kernels:
        summary[semconv.RUN_KERNELS_NOT_EMITTED] = kernels
    if selection.limit == _LIMIT_BYTES:  # the span cap's summary stays as it always was
        summary[semconv.RUN_NOT_EMITTED_LIMIT] = selection.limit
        summary[semconv.RUN_EMITTED_BYTES] = selection.emitted_bytes
    return summary


def _left_out_summary(nodes: list[NodeRecord]) -> dict[str, AttributeValue]:
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for node in nodes:
        count[node.op_type] += 1
        total[node.op_type] += node.dur
    op_types = sorted(count, key=lambda op: total[op], reverse=True)
    return {
        semconv.RUN_NOT_EMITTED_OP_TYPES: tuple(clip(op) for op in op_types),
        semconv.RUN_NOT_EMITTED_COUNTS: tuple(count[op] for op in op_types),
        semconv.RUN_NOT_EMITTED_DURATIONS_US: tuple(float(total[op]) for op in op_types),
    }


def _emitted_holders(
    held: list[int | None], emitted: Mapping[int, object]
) -> dict[int, int | None]:
    """Each emitted node's nearest holder that is emitted too (its span's parent)."""
    nearest: dict[int, int | None] = {}
    for at in emitted:
        holder = held[at]
        while holder is not None and holder not in emitted:
            holder = held[holder]
        nearest[at] = holder
    return nearest


def _depth(at: int, held_by: Mapping[int, int | None]) -> int:
    """How many spans hold node ``at``'s span."""
    depth, holder = 0, held_by[at]
    while holder is not None:
        depth, holder = depth + 1, held_by[holder]
    return depth


def _kernel_attributes(kernel: KernelRecord) -> dict[str, AttributeValue]:
    args = kernel.args
    attributes: dict[str, AttributeValue] = {semconv.KERNEL_NAME: clip(kernel.name)}
    if isinstance(args.get("op_name"), str):
        attributes[semconv.KERNEL_OP_NAME] = clip(args["op_name"])
    for prefix, name in (("grid_", semconv.KERNEL_GRID), ("block_", semconv.KERNEL_BLOCK)):
        dims = [int_value(args.get(prefix + axis)) for axis in "xyz"]
        if all(d is not None for d in dims):
            attributes[name] = tuple(d for d in dims if d is not None)
    stream = int_value(args.get("stream"))
    if stream is not None:
        attributes[semconv.KERNEL_STREAM] = stream
    return attributes

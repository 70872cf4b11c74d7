"""A read profile → finished spans: run → node → kernel, built directly as ``ReadableSpan``.

The SDK's ``start_span``/``end`` costs tens of microseconds per span (sampler, context,
attribute validation, locks); a profile of thousands of nodes would cost a second of CPU.
Profile spans are already finished when they are known, so they are built here as
``ReadableSpan`` objects with the TracerProvider's resource, ids from its id generator, and
attributes that are valid by construction, then handed to its span processors by
:mod:`otel_ort.delivery`. Span processors' ``on_start`` is not called for them.

The provider's span limits apply (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``,
``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``), as to its own spans; names from the profile are clipped
to :data:`otel_ort.text_limits.MAX_TEXT` characters whatever they say.

A node that a control-flow node (Loop, If, Scan) runs inside its window is its child span,
not its sibling. Time: absolute ns = ``profile.start_ns`` + ``ts`` µs. A node span covers its
Node event, the spans under it and any kernels linked to it (GPU kernels may finish after
the launching node's CPU window; the node's own duration stays in
``onnxruntime.node.duration_us``); a run span covers all its children. So every child lies
inside its parent.

At most ``max_node_spans`` node and kernel spans per run: the longest nodes are kept with
their kernels, then the longest unmatched kernels; the other nodes are summarised per op type
on the run span (``onnxruntime.run.not_emitted.*``), and the kernels left out counted
(``onnxruntime.run.kernels_not_emitted``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort.gc_pause import gc_paused
from otel_ort.profiling.model import KernelRecord, NodeRecord, Profile, RunRecord, holders
from otel_ort.text_limits import clip
from otel_ort.version import __version__

DEFAULT_MAX_NODE_SPANS = 10_000
"""Jaeger's UI slows down near 40k spans per trace and its default query returns 10k."""

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
PROFILE_SCOPE_NAME = "otel_ort.profile"
"""The instrumentation scope of node and kernel spans (export pipelines route by it)."""
_SCOPE = InstrumentationScope(PROFILE_SCOPE_NAME, __version__)
_SIZE_ARGS = ("output_size", "activation_size", "parameter_size")
_MAX_SHAPES = 16


class SpanBuilder:
    """Builds span trees from profiles for one TracerProvider."""

    def __init__(
        self, tracer_provider: TracerProvider, max_node_spans: int = DEFAULT_MAX_NODE_SPANS
    ) -> None:
        if max_node_spans < 0:
            raise ValueError(f"max_node_spans must be >= 0, got {max_node_spans}")
        self._resource = tracer_provider.resource
        self._ids = tracer_provider.id_generator
        limits = tracer_provider._span_limits
        self._max_attributes = limits.max_span_attributes
        self._max_length = limits.max_span_attribute_length
        self.max_node_spans = max_node_spans

    def run_tree(
        self,
        profile: Profile,
        run: RunRecord,
        parent: SpanContext | None = None,
        run_extra: Mapping[str, AttributeValue] | None = None,
        node_extra: Sequence[Mapping[str, AttributeValue]] = (),
        link: SpanContext | None = None,
    ) -> list[ReadableSpan]:
        """A run span (child of ``parent``, else the root of a new trace) and its subtree;
        children first, the run span last. ``run_extra``, ``node_extra``: more attributes
        for the run span and per node (as in :meth:`node_spans`), such as perf counts;
        ``link``: a span the run span links to."""
        trace_id = parent.trace_id if parent is not None else self._ids.generate_trace_id()
        run_context = SpanContext(trace_id, self._ids.generate_span_id(), False, _SAMPLED)
        spans, summary = self.node_spans(profile, run, run_context, node_extra)
        base = profile.start_ns
        start = min([base + int(run.ts * 1000)] + [span.start_time or 0 for span in spans])
        end = max([base + int(run.end * 1000)] + [span.end_time or 0 for span in spans])
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
        run_span = self._span(
            semconv.SPAN_RUN,
            run_context,
            parent,
            run_attributes,
            start,
            end,
            links=(Link(link),) if link is not None else (),
        )
        spans.append(run_span)
        return spans

    def node_spans(
        self,
        profile: Profile,
        run: RunRecord,
        parent: SpanContext,
        extra: Sequence[Mapping[str, AttributeValue]] = (),
    ) -> tuple[list[ReadableSpan], dict[str, AttributeValue]]:
        """Node and kernel spans under ``parent``, and the run-level summary attributes.
        ``extra``: more attributes per node (in ``run.nodes`` order), such as perf counts."""
        with gc_paused():
            return self._node_spans(profile, run, parent, extra)

    def _node_spans(
        self,
        profile: Profile,
        run: RunRecord,
        parent: SpanContext,
        extra: Sequence[Mapping[str, AttributeValue]],
    ) -> tuple[list[ReadableSpan], dict[str, AttributeValue]]:
        nodes = run.nodes
        emitted, left_out, unmatched = self._select(nodes, run.unmatched_kernels)
        more = {id(node): attributes for node, attributes in zip(nodes, extra, strict=False)}
        base = profile.start_ns
        trace_id = parent.trace_id
        new_id = self._ids.generate_span_id
        contexts = {at: SpanContext(trace_id, new_id(), False, _SAMPLED) for at in emitted}
        held_by = _emitted_holders(holders(nodes), contexts)
        spans: list[ReadableSpan] = []
        extents: dict[int, list[int]] = {}
        for at in emitted:
            node = nodes[at]
            extent = extents[at] = [base + int(node.ts * 1000), base + int(node.end * 1000)]
            for kernel in node.kernels:
                kernel_span = self._kernel_span(kernel, trace_id, contexts[at], base, False)
                spans.append(kernel_span)
                extent[0] = min(extent[0], kernel_span.start_time or extent[0])
                extent[1] = max(extent[1], kernel_span.end_time or extent[1])
        for at in sorted(emitted, key=lambda at: -_depth(at, held_by)):  # held ones first
            holder = held_by[at]
            if holder is not None:  # a holder's span holds its nodes' spans
                extents[holder][0] = min(extents[holder][0], extents[at][0])
                extents[holder][1] = max(extents[holder][1], extents[at][1])
        for at in emitted:
            node, holder = nodes[at], held_by[at]
            attributes = _node_attributes(node)
            attributes.update(more.get(id(node), {}))
            above = parent if holder is None else contexts[holder]
            start, end = extents[at]
            spans.append(self._span(clip(node.name), contexts[at], above, attributes, start, end))
        for kernel in unmatched:
            spans.append(self._kernel_span(kernel, trace_id, parent, base, True))
        summary: dict[str, AttributeValue] = {
            semconv.RUN_NODE_COUNT: len(nodes),
            semconv.RUN_NODES_NOT_EMITTED: len(left_out),
        }
        if run.unmatched_kernels:
            summary[semconv.RUN_UNMATCHED_KERNELS] = len(run.unmatched_kernels)
        if left_out:
            summary.update(_left_out_summary(left_out))
        kernels = sum(len(node.kernels) for node in left_out)
        kernels += len(run.unmatched_kernels) - len(unmatched)
        if kernels:
            summary[semconv.RUN_KERNELS_NOT_EMITTED] = kernels
        return spans, summary

    def _select(
        self, nodes: list[NodeRecord], unmatched: list[KernelRecord]
    ) -> tuple[list[int], list[NodeRecord], list[KernelRecord]]:
        """Which nodes get spans (their indexes, in order), those left out, and the unmatched
        kernels that get spans: at most ``max_node_spans`` spans, a node's with its kernels',
        the longest nodes first, then the longest unmatched kernels."""
        budget = self.max_node_spans
        if len(nodes) + sum(len(node.kernels) for node in nodes) + len(unmatched) <= budget:
            return list(range(len(nodes))), [], unmatched
        kept: set[int] = set()
        for at in sorted(range(len(nodes)), key=lambda at: -nodes[at].dur):
            cost = 1 + len(nodes[at].kernels)
            if cost <= budget:
                kept.add(at)
                budget -= cost
        longest = sorted(unmatched, key=lambda kernel: -kernel.dur)[:budget]
        shown = {id(kernel) for kernel in longest}
        left_out = [node for at, node in enumerate(nodes) if at not in kept]
        return sorted(kept), left_out, [kernel for kernel in unmatched if id(kernel) in shown]

    def _kernel_span(
        self,
        kernel: KernelRecord,
        trace_id: int,
        parent: SpanContext,
        base: int,
        unmatched: bool,
    ) -> ReadableSpan:
        context = SpanContext(trace_id, self._ids.generate_span_id(), False, _SAMPLED)
        attributes = _kernel_attributes(kernel)
        if unmatched:
            attributes[semconv.KERNEL_UNMATCHED] = True
        start = base + int(kernel.ts * 1000)
        return self._span(
            clip(kernel.name), context, parent, attributes, start, start + int(kernel.dur * 1000)
        )

    def _span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: Mapping[str, AttributeValue],
        start: int,
        end: int,
        links: Sequence[Link] = (),
    ) -> ReadableSpan:
        limit = self._max_attributes
        if self._max_length is not None or (limit is not None and len(attributes) > limit):
            attributes = BoundedAttributes(  # the provider's span limits, as the SDK applies them
                limit, attributes, immutable=True, max_value_len=self._max_length
            )
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=attributes,
            kind=SpanKind.INTERNAL,
            start_time=start,
            end_time=end,
            links=links,
            instrumentation_scope=_SCOPE,
        )


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


def _node_attributes(node: NodeRecord) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        semconv.NODE_NAME: clip(node.name),
        semconv.NODE_OP_TYPE: clip(node.op_type),
        semconv.NODE_PROVIDER: clip(node.provider),
        semconv.NODE_DURATION_US: float(node.dur),
    }
    tid = _int(node.tid)
    if tid is not None:
        attributes[semconv.THREAD_ID] = tid
    for key, value in node.args.items():  # one pass: this runs once per node of every profile
        name = _INT_ARGS.get(key)
        if name is None and key.startswith("mem_"):
            name = _INT_ARGS[key] = semconv.NODE_SIZE_PREFIX + key
        if name is not None:
            try:  # not contextlib.suppress: it costs 1 us a value, per node
                number = int(value)
            except (TypeError, ValueError, OverflowError):  # Infinity, from a file not ORT's
                continue
            if _INT64[0] <= number <= _INT64[1]:
                attributes[name] = number
        elif key in _SHAPE_ARGS:
            shapes = _shapes(value)
            if shapes:
                attributes[_SHAPE_ARGS[key]] = shapes
        elif key == "thread_scheduling_stats" and isinstance(value, dict):
            attributes.update(_thread_summary(value))
    return attributes


# args read as integers: the sizes, ORT's mem_* statistics (added as met), the node index
_INT_ARGS = {key: semconv.NODE_SIZE_PREFIX + key for key in _SIZE_ARGS}
_INT_ARGS["node_index"] = semconv.NODE_INDEX
_INT_ARGS["graph_index"] = semconv.NODE_INDEX  # ORT <= 1.13
_SHAPE_ARGS = {
    "input_type_shape": semconv.NODE_INPUT_SHAPES,
    "output_type_shape": semconv.NODE_OUTPUT_SHAPES,
}


def _shapes(value: Any) -> tuple[str, ...]:
    """ORT's ``[{"float": [4, 64]}, ...]`` → ``("float[4,64]", ...)``, at most 16 entries."""
    if not isinstance(value, list):
        return ()
    shapes = []
    for entry in value[:_MAX_SHAPES]:
        if isinstance(entry, dict):
            for dtype, dims in entry.items():
                if isinstance(dims, list):
                    shapes.append(clip(f"{dtype}[{','.join(map(str, dims))}]"))
    if len(value) > _MAX_SHAPES:
        shapes.append(f"+{len(value) - _MAX_SHAPES} more")
    return tuple(shapes)


def _thread_summary(stats: dict[str, Any]) -> dict[str, AttributeValue]:
    summary: dict[str, AttributeValue] = {}
    main = stats.get("main_thread")
    if isinstance(main, dict):
        if isinstance(main.get("thread_pool_name"), str):
            summary[semconv.NODE_THREAD_POOL] = clip(main["thread_pool_name"])
        for key, name in (
            ("Run", semconv.NODE_MAIN_THREAD_RUN_US),
            ("Wait", semconv.NODE_MAIN_THREAD_WAIT_US),
        ):
            number = _int(main.get(key))
            if number is not None:
                summary[name] = number
    sub_threads = stats.get("sub_threads")
    if isinstance(sub_threads, dict):
        runs = [_int(s.get("num_run")) or 0 for s in sub_threads.values() if isinstance(s, dict)]
        summary[semconv.NODE_THREADS_USED] = 1 + sum(1 for n in runs if n > 0)
        summary[semconv.NODE_THREAD_TASKS] = min(sum(runs), _INT64[1])
    return summary


def _kernel_attributes(kernel: KernelRecord) -> dict[str, AttributeValue]:
    args = kernel.args
    attributes: dict[str, AttributeValue] = {semconv.KERNEL_NAME: clip(kernel.name)}
    if isinstance(args.get("op_name"), str):
        attributes[semconv.KERNEL_OP_NAME] = clip(args["op_name"])
    for prefix, name in (("grid_", semconv.KERNEL_GRID), ("block_", semconv.KERNEL_BLOCK)):
        dims = [_int(args.get(prefix + axis)) for axis in "xyz"]
        if all(d is not None for d in dims):
            attributes[name] = tuple(d for d in dims if d is not None)
    stream = _int(args.get("stream"))
    if stream is not None:
        attributes[semconv.KERNEL_STREAM] = stream
    return attributes


def _int(value: Any) -> int | None:
    """ORT writes numbers in args as JSON strings (``"1024"``) or numbers; ``None`` for one
    OTLP cannot carry (a file not ORT's)."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if type(value) is int and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


_INT64 = (-(2**63), 2**63 - 1)
"""The integers OTLP carries."""

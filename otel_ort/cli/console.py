"""Render finished spans as an indented tree for the terminal."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_ort import semconv
from otel_ort.cli.tables import printable

# Attributes worth a glance in a terminal, with their short labels, in display order;
# a run's model and providers are on its session's span already.
_SHOWN = {
    semconv.NODE_OP_TYPE: "op",
    semconv.RUN_INPUTS: "inputs",
    semconv.RUN_PROFILED: "profiled",
    semconv.ERROR_TYPE: "error",
}
_SHOWN_BY_NAME = {
    semconv.SPAN_SESSION_CREATE: {
        semconv.MODEL_PATH: "model",
        semconv.SESSION_PROVIDERS: "providers",
        semconv.ERROR_TYPE: "error",
    },
}
_MAX_VALUE = 60


def render_span_tree(spans: Iterable[ReadableSpan], max_children: int = 8) -> str:
    """One tree per trace, children in start order.

    Of more than ``max_children`` children, the first ones and the last are shown, with a
    ``… N more`` line between them.
    """
    spans = list(spans)
    ids = {span.context.span_id for span in spans if span.context}
    children: dict[int | None, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children[parent].append(span)
    for siblings in children.values():
        siblings.sort(key=lambda s: s.start_time or 0)
    lines: list[str] = []
    for root in children[None]:
        trace_id = root.context.trace_id if root.context else 0
        lines.append(f"trace {trace_id:032x}")
        _render(root, children, "", "", max_children, lines)
    return "\n".join(lines)


def _render(
    span: ReadableSpan,
    children: dict[int | None, list[ReadableSpan]],
    first_prefix: str,
    prefix: str,
    max_children: int,
    lines: list[str],
) -> None:
    lines.append(_line(span, first_prefix))
    kids = children.get(span.context.span_id if span.context else None, [])
    hidden = max(0, len(kids) - max_children)
    shown: Sequence[ReadableSpan] = [*kids[: max_children - 1], kids[-1]] if hidden else kids
    for index, child in enumerate(shown):
        if hidden and index == len(shown) - 1:
            lines.append(f"{prefix}├─ … {hidden} more")
        last = index == len(shown) - 1
        branch, extension = ("└─ ", "   ") if last else ("├─ ", "│  ")
        _render(child, children, prefix + branch, prefix + extension, max_children, lines)


def _line(span: ReadableSpan, prefix: str) -> str:
    duration_ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    label = f"{prefix}{printable(span.name)}"
    details = []
    for key, short in _SHOWN_BY_NAME.get(span.name, _SHOWN).items():
        value = (span.attributes or {}).get(key)
        if value is not None:
            if isinstance(value, tuple | list):
                text = ",".join(map(str, value))
            else:
                text = str(value).lower() if isinstance(value, bool) else str(value)
            if len(text) > _MAX_VALUE:
                text = text[: _MAX_VALUE - 1] + "…"
            details.append(f"{short}={printable(text)}")
    if semconv.NODE_OP_TYPE in (span.attributes or {}):
        details.extend(_perf_details(span.attributes or {}))
    if span.status.status_code is StatusCode.ERROR:
        details.append("status=ERROR")
    return f"{label:<48} {duration_ms:9.3f} ms  {' '.join(details)}".rstrip()


def _perf_details(attributes: Mapping[str, object]) -> list[str]:
    """A node's perf counts (``perf.<alias>``), CPU time in µs."""
    details = []
    for key, value in attributes.items():
        alias = key.removeprefix(semconv.PERF_PREFIX)
        if alias == key or "." in alias or not isinstance(value, int | float):
            continue
        text = f"{value / 1e3:.1f}µs" if alias in semconv.PERF_TIME_ALIASES else f"{value:g}"
        details.append(f"{alias}={text}")
    return details

"""A node span's attributes from its ``Node`` event's args: the dict form (for the user's span
processors, OTLP/JSON and span limits). :mod:`otel_ort.profiles.node_encoding` writes the
same attributes straight to OTLP protobuf; the two must agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_ort import semconv
from otel_ort._util.text_limits import clip
from otel_ort.profiles.records import NodeRecord

SIZE_ARGS = ("output_size", "activation_size", "parameter_size")
MAX_SHAPES = 16
INT64 = (-(2**63), 2**63 - 1)
"""The integers OTLP carries."""
THREAD_STATS_ARG = "thread_scheduling_stats"
INDEX_ARGS = ("node_index", "graph_index")
"""Both become ``onnxruntime.node.index`` (``graph_index``: ORT <= 1.13)."""

# args read as integers: the sizes, ORT's mem_* statistics (added as met), the node index
INT_ARGS = {key: semconv.NODE_SIZE_PREFIX + key for key in SIZE_ARGS}
INT_ARGS.update(dict.fromkeys(INDEX_ARGS, semconv.NODE_INDEX))
SHAPE_ARGS = {
    "input_type_shape": semconv.NODE_INPUT_SHAPES,
    "output_type_shape": semconv.NODE_OUTPUT_SHAPES,
}


def int_arg_name(key: str) -> str | None:
    """The attribute an arg read as an integer becomes, or ``None`` (not such an arg)."""
    name = INT_ARGS.get(key)
    if name is None and key.startswith("mem_"):
        name = INT_ARGS[key] = semconv.NODE_SIZE_PREFIX + key
    return name


def node_attributes(
    node: NodeRecord, extra: Mapping[str, AttributeValue] | None = None
) -> dict[str, AttributeValue]:
    """The node span's attributes, then ``extra`` (perf counts) over them."""
    attributes: dict[str, AttributeValue] = {
        semconv.NODE_NAME: clip(node.name),
        semconv.NODE_OP_TYPE: clip(node.op_type),
        semconv.NODE_PROVIDER: clip(node.provider),
        semconv.NODE_DURATION_US: float(node.dur),
    }
    tid = int_value(node.tid)
    if tid is not None:
        attributes[semconv.THREAD_ID] = tid
    for key, value in node.args.items():  # one pass: this runs once per node of every profile
        name = int_arg_name(key)
        if name is not None:
            number = int_of(value)
            if number is not None:
                attributes[name] = number
        elif key in SHAPE_ARGS:
            shapes = shapes_of(value)
            if shapes:
                attributes[SHAPE_ARGS[key]] = shapes
        elif key == THREAD_STATS_ARG and isinstance(value, dict):
            attributes.update(thread_summary(value))
    if extra:
        attributes.update(extra)
    return attributes


def int_of(value: Any) -> int | None:
    """An integer arg's value (``int(value)``, ORT writes ``"1024"``), or ``None`` when it
    is none or one OTLP cannot carry (``Infinity``, from a file not ORT's)."""
    try:  # not contextlib.suppress: it costs 1 us a value, per node
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if INT64[0] <= number <= INT64[1] else None


def shapes_of(value: Any) -> tuple[str, ...]:
    """ORT's ``[{"float": [4, 64]}, ...]`` → ``("float[4,64]", ...)``, at most 16 entries."""
    if not isinstance(value, list):
        return ()
    shapes = []
    for entry in value[:MAX_SHAPES]:
        if isinstance(entry, dict):
            for dtype, dims in entry.items():
                if isinstance(dims, list):
                    shapes.append(clip(f"{dtype}[{','.join(map(str, dims))}]"))
    if len(value) > MAX_SHAPES:
        shapes.append(f"+{len(value) - MAX_SHAPES} more")
    return tuple(shapes)


def thread_summary(stats: dict[str, Any]) -> dict[str, AttributeValue]:
    """ORT's ``thread_scheduling_stats`` → the pool, the main thread's run and wait µs, the
    threads that ran tasks and how many tasks."""
    summary: dict[str, AttributeValue] = {}
    main = stats.get("main_thread")
    if isinstance(main, dict):
        if isinstance(main.get("thread_pool_name"), str):
            summary[semconv.NODE_THREAD_POOL] = clip(main["thread_pool_name"])
        for key, name in (
            ("Run", semconv.NODE_MAIN_THREAD_RUN_US),
            ("Wait", semconv.NODE_MAIN_THREAD_WAIT_US),
        ):
            number = int_value(main.get(key))
            if number is not None:
                summary[name] = number
    sub_threads = stats.get("sub_threads")
    if isinstance(sub_threads, dict):
        runs = [
            int_value(s.get("num_run")) or 0 for s in sub_threads.values() if isinstance(s, dict)
        ]
        summary[semconv.NODE_THREADS_USED] = 1 + sum(1 for n in runs if n > 0)
        summary[semconv.NODE_THREAD_TASKS] = min(sum(runs), INT64[1])
    return summary


def int_value(value: Any) -> int | None:
    """ORT writes numbers in args as JSON strings (``"1024"``) or numbers; ``None`` for one
    OTLP cannot carry (a file not ORT's)."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if type(value) is int and INT64[0] <= value <= INT64[1]:
        return value
    return None

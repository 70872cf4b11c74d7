"""Profiles → span trees through a real SDK TracerProvider, in memory and over OTLP."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ort import semconv
from otel_ort._util.text_limits import MAX_TEXT
from otel_ort.export.delivery import SpanDelivery
from otel_ort.profiles import read_profile
from otel_ort.profiles.spans import SpanBuilder
from tests.conftest import attrs
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.profiles import (
    kernel_event,
    loop_profile,
    model_run,
    node_event,
    session_level_profile,
    write,
)


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_level_profile(tmp_path_factory.mktemp("profiles"))


def convert(path: Path, provider: TracerProvider, **options: int) -> int:
    profile = read_profile(path)
    builder, delivery = SpanBuilder(provider, **options), SpanDelivery(provider)
    return sum(delivery.deliver_drafts(builder.run_drafts(profile, run)) for run in profile.runs)


def converted(path: Path, **options: int) -> tuple[ReadableSpan, ...]:
    """The spans ``convert`` makes of ``path``, finished."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(memory))
    convert(path, provider, **options)
    provider.shutdown()
    return memory.get_finished_spans()


def check_tree(spans: list[ReadableSpan], node_events: int) -> None:
    by_id = {span.context.span_id: span for span in spans if span.context}
    runs = [span for span in spans if span.name == semconv.SPAN_RUN]
    nodes = [span for span in spans if semconv.NODE_OP_TYPE in attrs(span)]
    assert len(nodes) == node_events
    for node in nodes:
        assert node.parent is not None
        run = by_id[node.parent.span_id]
        assert run.name == semconv.SPAN_RUN
        assert run.start_time <= node.start_time <= node.end_time <= run.end_time  # type: ignore[operator]
        assert node.context.trace_id == run.context.trace_id
    assert len({run.context.trace_id for run in runs}) == len(runs)  # one trace per run


def test_every_node_event_becomes_one_span_under_its_run(real_profile: Path) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "replay"}))
    provider.add_span_processor(BatchSpanProcessor(memory))  # default queue: 2048 < 903 x 3
    assert convert(real_profile, provider) == 0
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    events = json.loads(real_profile.read_text())
    check_tree(spans, sum(1 for e in events if e["cat"] == "Node"))
    assert len(spans) == 903
    assert {span.resource.attributes["service.name"] for span in spans} == {"replay"}
    node = next(s for s in spans if attrs(s).get(semconv.NODE_NAME) == "matmul_0")
    assert attrs(node)[semconv.NODE_OP_TYPE] == "MatMul"
    assert attrs(node)[semconv.NODE_INPUT_SHAPES] == ("float[2,16]",)  # weights not listed
    assert attrs(node)[semconv.NODE_SIZE_PREFIX + "output_size"] == 128


def test_same_tree_arrives_over_otlp(real_profile: Path) -> None:
    with OtlpReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True))
        )
        assert convert(real_profile, provider) == 0
        provider.shutdown()
        received = receiver.wait_for_spans(903)
    spans = [span for _, span in received]
    assert len(spans) == 903
    ids = {span.span_id: span for span in spans}
    runs = [span for span in spans if span.name == semconv.SPAN_RUN]
    nodes = [span for span in spans if span.name != semconv.SPAN_RUN]
    assert len(runs) == 3 and len(nodes) == 900
    for node in nodes:
        run = ids[node.parent_span_id]
        assert run.name == semconv.SPAN_RUN
        assert run.start_time_unix_nano <= node.start_time_unix_nano
        assert node.end_time_unix_nano <= run.end_time_unix_nano


def test_span_cap_keeps_longest_nodes_with_their_kernels_and_summarises_the_rest(
    tmp_path: Path,
) -> None:
    """The cap counts kernel spans too: a GPU run of 10k nodes has several kernels a node."""
    events = [model_run(0, 1000)] + [
        node_event(f"n{k}", "Relu" if k % 2 else "Add", 10 + k * 10, 1 + k) for k in range(20)
    ]
    events += [  # a kernel launched by a node left out, one by a node kept, two by no node
        kernel_event("k0", "Add", 11, 1, parent_name="n0_kernel_time"),
        kernel_event("k19", "Relu", 201, 1, parent_name="n19_kernel_time"),
        kernel_event("stray_short", "Softmax", 500, 1),
        kernel_event("stray_long", "Softmax", 600, 9),
    ]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(memory))
    convert(write(tmp_path / "many.json", events), provider, max_node_spans=5)
    convert(write(tmp_path / "many.json", events), provider, max_node_spans=6)
    provider.shutdown()
    spans = memory.get_finished_spans()
    runs = [s for s in spans if s.name == semconv.SPAN_RUN]
    emitted = [
        sorted(s.name for s in spans if s.parent and s.context.trace_id == run.context.trace_id)
        for run in runs
    ]
    assert emitted == [
        ["k19", "n16", "n17", "n18", "n19"],  # n19 and its kernel: 2 of the 5
        ["k19", "n15", "n16", "n17", "n18", "n19"],
    ]  # the stray kernels: none fit
    run = runs[0]
    assert attrs(run)[semconv.RUN_NODE_COUNT] == 20
    assert attrs(run)[semconv.RUN_NODES_NOT_EMITTED] == 16
    assert attrs(run)[semconv.RUN_KERNELS_NOT_EMITTED] == 3  # k0, and the 2 unmatched
    assert attrs(run)[semconv.RUN_UNMATCHED_KERNELS] == 2
    assert sum(attrs(run)[semconv.RUN_NOT_EMITTED_COUNTS]) == 16
    assert set(attrs(run)[semconv.RUN_NOT_EMITTED_OP_TYPES]) == {"Add", "Relu"}


def test_a_loops_body_nodes_are_child_spans_of_the_loop_node(tmp_path: Path) -> None:
    """A real ORT Loop: its body's nodes run inside its window, on its thread; as siblings
    they would show as parallel work in a trace viewer."""
    spans = converted(loop_profile(tmp_path, trips=5))
    (run,) = [s for s in spans if s.name == semconv.SPAN_RUN]
    (loop_span,) = [s for s in spans if attrs(s).get(semconv.NODE_OP_TYPE) == "Loop"]
    body = [s for s in spans if s.parent and s.parent.span_id == loop_span.context.span_id]
    assert len(body) >= 5  # a node or more per iteration
    assert [s for s in spans if s.parent and s.parent.span_id == run.context.span_id] == [loop_span]
    for span in body:
        times = (loop_span.start_time, span.start_time, span.end_time, loop_span.end_time)
        assert sorted(times, key=lambda time: time or 0) == list(times)


def test_a_span_holds_what_its_held_spans_hold(tmp_path: Path) -> None:
    """A Loop holds an If that holds a node starting with it, whose GPU kernel ends after the
    Loop's own window: each span still lies inside its parent."""
    events = [
        model_run(0, 300),
        node_event("loop", "Loop", 0, 100),
        node_event("if", "If", 10, 40),
        node_event("add", "Add", 10, 30),
        kernel_event("k", "Add", 11, 200, parent_name="add_kernel_time"),
    ]
    spans = {span.name: span for span in converted(write(tmp_path / "nested.json", events))}
    for child, parent in (("k", "add"), ("add", "if"), ("if", "loop")):
        held, holder = spans[child], spans[parent]
        assert held.parent is not None and held.parent.span_id == holder.context.span_id
        times = (holder.start_time, held.start_time, held.end_time, holder.end_time)
        assert sorted(times, key=lambda time: time or 0) == list(times), (child, parent)


def test_the_longest_unmatched_kernels_fill_what_the_cap_leaves(tmp_path: Path) -> None:
    events = [model_run(0, 1000), node_event("n", "Relu", 10, 5)]
    events += [kernel_event(f"stray{d}", "Softmax", 100 * d, d) for d in (1, 9, 5)]
    spans = converted(write(tmp_path / "stray.json", events), max_node_spans=3)
    assert sorted(s.name for s in spans if s.parent) == ["n", "stray5", "stray9"]
    (run,) = [s for s in spans if s.name == semconv.SPAN_RUN]
    assert attrs(run)[semconv.RUN_KERNELS_NOT_EMITTED] == 1


def test_the_providers_span_limits_apply_to_profile_spans(tmp_path: Path) -> None:
    long_name = "encoder/" + "layer/" * 200 + "MatMul"  # 1,214 characters
    kernel_name = "void gemm<" + "float, " * 300 + ">"
    events = [model_run(0, 100), node_event(long_name, "MatMul", 10, 20)]
    events.append(kernel_event(kernel_name, "MatMul", 12, 5))
    path = write(tmp_path / "long.json", events)
    unlimited = SpanLimits()  # the SDK's default: no bound on attribute values
    for limits in (
        unlimited,
        SpanLimits(max_span_attribute_length=64),
        SpanLimits(max_span_attributes=3),
    ):
        memory = InMemorySpanExporter()
        provider = TracerProvider(span_limits=limits)
        provider.add_span_processor(BatchSpanProcessor(memory))
        convert(path, provider)
        provider.shutdown()
        spans = memory.get_finished_spans()
        (node,) = [span for span in spans if span.name.startswith("encoder/")]
        (kernel,) = [span for span in spans if span.name.startswith("void gemm<")]
        if limits is unlimited:  # otel-ort's own bound on names from the profile
            for span, name in ((node, long_name), (kernel, kernel_name)):
                assert span.name == name[: MAX_TEXT - 1] + "…"
            assert attrs(node)[semconv.NODE_NAME] == node.name
            assert attrs(kernel)[semconv.KERNEL_NAME] == kernel.name
        elif limits.max_span_attribute_length:
            assert attrs(node)[semconv.NODE_NAME] == long_name[:64]
            assert all(len(v) <= 64 for s in spans for v in attrs(s).values() if isinstance(v, str))
        else:
            assert all(len(attrs(span)) <= 3 for span in spans) and node.dropped_attributes > 0


def test_kernels_hang_under_nodes_and_parents_cover_children(tmp_path: Path) -> None:
    events = [
        model_run(0, 100),
        node_event("mm", "MatMul", 10, 20),
        kernel_event("gemm", "MatMul", 25, 200),  # starts in mm, ends after the run window
        kernel_event("stray", "Softmax", 50, 5),
    ]
    spans = {span.name: span for span in converted(write(tmp_path / "gpu.json", events))}
    run, node, gemm, stray = (spans[n] for n in (semconv.SPAN_RUN, "mm", "gemm", "stray"))
    assert gemm.parent.span_id == node.context.span_id  # type: ignore[union-attr]
    assert stray.parent.span_id == run.context.span_id  # type: ignore[union-attr]
    assert attrs(stray)[semconv.KERNEL_UNMATCHED] is True
    assert attrs(gemm)[semconv.KERNEL_GRID] == (4, 1, 1)
    assert attrs(gemm)[semconv.KERNEL_BLOCK] == (256, 1, 1)
    assert node.end_time == gemm.end_time and run.end_time == gemm.end_time
    assert attrs(node)[semconv.NODE_DURATION_US] == 20.0


def test_numbers_otlp_cannot_carry_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file not ORT's may hold integers past 64 bits; the OTLP encoder would log and drop
    each, span after span."""
    huge = 2**70
    stats = {"main_thread": {"Run": str(huge)}, "sub_threads": {"a": {"num_run": str(huge)}}}
    events = [
        model_run(0, 100, tid=huge),
        node_event("mm", "MatMul", 10, 20, tid=huge, thread_scheduling_stats=stats),
        kernel_event("gemm", "MatMul", 12, 5, stream=str(huge), grid_x=str(huge)),
    ]
    spans = converted(write(tmp_path / "huge.json", events))
    numbers = [v for span in spans for v in attrs(span).values() if isinstance(v, int)]
    numbers += [n for span in spans for v in attrs(span).values() if isinstance(v, tuple)
                for n in v if isinstance(n, int)]  # fmt: skip
    assert numbers and all(-(2**63) <= n < 2**63 for n in numbers)
    node = next(span for span in spans if span.name == "mm")
    assert semconv.THREAD_ID not in attrs(node)
    assert semconv.NODE_MAIN_THREAD_RUN_US not in attrs(node)
    encode_spans(spans)
    assert "Failed to encode" not in caplog.text


def test_delivery_needs_the_sdk_provider() -> None:
    from opentelemetry.trace import NoOpTracerProvider

    with pytest.raises(TypeError, match="need the OpenTelemetry SDK's TracerProvider"):
        SpanDelivery(NoOpTracerProvider())


def test_node_spans_hang_under_a_live_span(real_profile: Path) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(memory))
    profile = read_profile(real_profile)
    with provider.get_tracer("test").start_as_current_span("onnxruntime.run") as live:
        context = live.get_span_context()
        drafts, summary = SpanBuilder(provider).node_drafts(
            profile, profile.runs[0], context.trace_id, context.span_id
        )
    SpanDelivery(provider).deliver_drafts(drafts)
    provider.shutdown()
    nodes = [s for s in memory.get_finished_spans() if s.name != "onnxruntime.run"]
    assert len(nodes) == 300 and summary[semconv.RUN_NODE_COUNT] == 300
    assert {s.parent.span_id for s in nodes if s.parent} == {live.get_span_context().span_id}


def test_truncated_file_becomes_spans_that_say_so(real_profile: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(real_profile.read_text()[: int(real_profile.stat().st_size * 0.8)])
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(memory))
    convert(cut, provider)
    provider.shutdown()
    runs = sorted(
        (s for s in memory.get_finished_spans() if s.name == semconv.SPAN_RUN),
        key=lambda s: attrs(s)[semconv.RUN_INDEX],
    )
    assert [attrs(r)[semconv.PROFILE_TRUNCATED] for r in runs] == [True, True, True]
    assert [attrs(r).get(semconv.RUN_COMPLETE, True) for r in runs] == [True, True, False]


def test_spans_a_shut_down_processor_cannot_take_are_counted(real_profile: Path) -> None:
    provider = TracerProvider()
    processor = BatchSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(processor)
    processor.shutdown()  # type: ignore[no-untyped-call]
    assert convert(real_profile, provider) == 903  # every span counted, none silently lost


class WatchedQueue(collections.deque[ReadableSpan]):
    """A batch processor's queue that remembers how full it got."""

    most = 0

    def appendleft(self, span: ReadableSpan) -> None:
        super().appendleft(span)
        self.most = max(self.most, len(self))


def test_a_burst_leaves_room_for_the_spans_other_threads_end_meanwhile(
    real_profile: Path,
) -> None:
    """A burst of profile spans (903, given 20 times) to a small batch queue never fills more
    than 7/8 of it: the rest is for the request spans other threads end meanwhile, which
    the SDK would drop at a full queue. (Checked on the queue: request threads at full speed
    on this 2-vCPU VM fill a small queue on their own, while the SDK's worker waits for a
    CPU.)"""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    processor = BatchSpanProcessor(memory, max_queue_size=64, max_export_batch_size=64)
    queue = processor._batch_processor._queue = WatchedQueue(maxlen=64)
    provider.add_span_processor(processor)
    profile = read_profile(real_profile)
    builder = SpanBuilder(provider)
    spans = [span for run in profile.runs for span in builder.run_drafts(profile, run)]
    spans *= 20
    assert SpanDelivery(provider).deliver_drafts(spans) == 0
    provider.shutdown()
    assert len(memory.get_finished_spans()) == len(spans)
    assert queue.most == 64 - 64 // 8 + 1  # a span more than 7/8 makes the next one flush

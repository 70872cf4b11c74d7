"""``configure()``: OTLP export for processes without their own OpenTelemetry SDK set-up.

Request spans (every ``onnxruntime.run`` and the caller's own spans) and profile spans (the
node and kernel spans of a profiled run, delivered in bursts of thousands) go through two
separate batch processors, each with its own queue and exporter, so a burst can never evict a
request span. Profile spans are delivered with back-pressure (:mod:`otel_ort.export.delivery`) and
are not dropped by their queue; request spans that find their queue full are. Every span that
is dropped, by a full queue or by a failed export, is counted in the ``otel_ort.spans.dropped``
metric and logged (once, then at most once a minute).

An export that fails (collector unreachable) marks the endpoint down: the batches of the next
few seconds are dropped at once, counted, instead of retrying each for the whole export
timeout, and at shutdown an endpoint still down is not tried again. The profile worker keeps
writing profile files, and the process exits promptly.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import math
import os
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter as Counter_
from opentelemetry.metrics import MeterProvider as ApiMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_ort import semconv
from otel_ort._util.bounded import call_within, seconds_left
from otel_ort._util.forking import after_fork_in_child, renew_locks_in_child
from otel_ort.cli.tables import plural
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_transport import Encoded, EncodedExport, encoded_span_exporter
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.version import __version__

_logger = logging.getLogger("otel_ort")

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")

PROFILE_QUEUE_SIZE = 8192
"""Profile spans held for export (about 2-3 KiB each): a few profiled runs' worth."""

UNREACHABLE_PAUSE_S = 5.0
"""After a failed export, batches are dropped (counted) without trying for this long."""

_LOG_INTERVAL_S = 60.0
_GRACE_S = 0.5
"""At shutdown, how long past the deadline a span processor may take to count what it left,
and at least what the meter provider gets to stop its readers."""
_EXPORTERS = {  # module (under ...otlp.proto.grpc / .http) and class of each signal
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
}


class DropCounter:
    """Dropped spans by stream and reason: a metric, and a log line at most once a minute
    (and a last one at shutdown) with what was dropped since the previous line."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._unlogged: Counter[tuple[str, str]] = Counter()
        self._why = ""
        self._last_logged = -_LOG_INTERVAL_S
        self._lock = threading.Lock()
        self._metric: Counter_ | None = None
        after_fork_in_child(self, DropCounter._restart)

    def _restart(self) -> None:
        """In a forked child: count its own drops, under a lock of its own."""
        self._counts, self._unlogged, self._lock = Counter(), Counter(), threading.Lock()

    def measure_with(self, meter_provider: ApiMeterProvider) -> None:
        """Record drops from now on in the ``otel_ort.spans.dropped`` counter of this provider."""
        meter = metrics.get_meter("otel_ort", __version__, meter_provider)
        self._metric = meter.create_counter(
            semconv.METRIC_SPANS_DROPPED, "{span}", "Spans otel-ort's export pipeline dropped."
        )

    def add(self, stream: str, reason: str, count: int, why: str) -> None:
        """``count`` spans of ``stream`` (requests, profiles) were dropped for ``reason``."""
        if count <= 0:
            return
        if self._metric is not None:
            attributes = {semconv.EXPORT_STREAM: stream, semconv.ERROR_TYPE: reason}
            self._metric.add(count, attributes)
        with self._lock:
            self._counts[stream, reason] += count
            self._unlogged[stream, reason] += count
            self._why = why
        self.log(force=False)

    def log(self, force: bool = True) -> None:
        """Log what was dropped since the last line: now if ``force``, else once a minute."""
        now = time.monotonic()
        with self._lock:
            if not self._unlogged or (not force and now - self._last_logged < _LOG_INTERVAL_S):
                return
            unlogged, self._unlogged, self._last_logged = self._unlogged, Counter(), now
            totals = sum(self._counts.values())
            why = self._why
        parts = ", ".join(f"{n} of {s} ({r})" for (s, r), n in sorted(unlogged.items()))
        _logger.warning(
            "otel-ort: spans dropped: %s; last because %s (%d in all, counted in the %s metric)",
            parts,
            why,
            totals,
            semconv.METRIC_SPANS_DROPPED,
        )

    def counts(self) -> dict[str, int]:
        """Dropped spans so far, keyed ``"<stream>.<reason>"``."""
        with self._lock:
            return {f"{stream}.{reason}": n for (stream, reason), n in self._counts.items()}


class Endpoint:
    """Whether the collector answers: down after a failed export, up again after a success.

    While down, exports in the ``pause_s`` after each failure are not tried; after
    :meth:`give_up` (shutdown of a pipeline whose endpoint is down) none are.
    """

    def __init__(self, target: str, pause_s: float = UNREACHABLE_PAUSE_S) -> None:
        self.target = target
        self._pause_s = pause_s
        self._down = False
        self._retry_at = 0.0

    def should_try(self) -> bool:
        return not self._down or time.monotonic() >= self._retry_at

    def answered(self, ok: bool) -> None:
        self._down = not ok
        if self._retry_at != math.inf:  # given up: an export in flight does not undo that
            self._retry_at = time.monotonic() + self._pause_s

    @property
    def down(self) -> bool:
        return self._down

    def give_up(self, target_down: bool = False) -> None:
        """Shutting down: if the endpoint is down (or, ``target_down``, another exporter
        found its target down), try nothing more (it would only wait)."""
        if self._down or target_down:
            self._down = True
            self._retry_at = math.inf


class CountingSpanExporter(SpanExporter):
    """Forwards to an exporter, counting spans sent and lost; skips an endpoint that is down."""

    def __init__(
        self,
        inner: SpanExporter,
        endpoint: Endpoint,
        drops: DropCounter | None = None,
        stream: str = "requests",
    ) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0
        self._endpoint = endpoint
        self._drops = drops
        self._stream = stream
        self._in_flight = 0
        self._abandoned = 0  # how many times exports in flight were given up
        self._lock = threading.Lock()
        after_fork_in_child(self, CountingSpanExporter._restart)

    def _restart(self) -> None:
        """In a forked child: count its own exports (the parent's in flight are not its
        spans to lose), under a lock of its own."""
        self.sent = self.failed = self._in_flight = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._counted(len(spans), partial(self.inner.export, spans))

    def export_encoded(self, batch: Encoded) -> SpanExportResult:
        """An encoded request (profile spans: :mod:`otel_ort.export.profile_export`), counted
        alike."""
        return self._counted(
            batch.spans, partial(cast(EncodedExport, self.inner).export_encoded, batch)
        )

    def _counted(self, spans: int, send: Callable[[], SpanExportResult]) -> SpanExportResult:
        target = self._endpoint.target
        if not self._endpoint.should_try():
            return self._lost(spans, f"{target} failed moments ago (not retried yet)")
        with self._lock:
            self._in_flight += spans
            abandoned = self._abandoned
        try:
            result = send()
        except Exception as exc:  # an exporter bug must not escape the batch thread uncounted
            result, why = SpanExportResult.FAILURE, f"exporting to {target} raised {exc!r}"
        else:
            why = f"the export to {target} failed (the exporter's log says why)"
        with self._lock:
            self._in_flight -= spans
            if abandoned != self._abandoned:  # counted lost by abandon_in_flight
                return result
        self._endpoint.answered(result is SpanExportResult.SUCCESS)
        if result is not SpanExportResult.SUCCESS:
            return self._lost(spans, why)
        self.sent += spans
        return result

    def _lost(self, spans: int, why: str) -> SpanExportResult:
        self.failed += spans
        if self._drops is not None:
            self._drops.add(self._stream, "export_failed", spans, why)
        return SpanExportResult.FAILURE

    def abandon_in_flight(self) -> int:
        """Shutdown gave up waiting: the spans of exports still in flight, which count as lost
        now (they are not counted again when the export ends)."""
        with self._lock:
            self._abandoned += 1
            in_flight = self._in_flight
        if in_flight:  # a collector that has not answered by then counts as down
            self._endpoint.answered(False)
        return in_flight

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def delivery_report(
    exporter: CountingSpanExporter, endpoint: str, traces: int, spans: int
) -> tuple[str, str]:
    """After the provider's shutdown: a line on what reached ``endpoint`` of the ``spans``
    handed to the provider, and what was lost (``""`` if nothing), for the CLI commands that
    replay profiles over OTLP. Spans neither sent nor failed were dropped, or still queued or
    in an export when the shutdown's timeout ran out."""
    sent, failed = exporter.sent, exporter.failed
    summary = (
        f"OTLP: {sent} of {plural(spans, 'span')} ({plural(traces, 'trace')}) sent to "
        f"{endpoint}; {failed} failed to send, {max(0, spans - sent - failed)} dropped, or "
        "still unsent when the shutdown timed out"
    )
    if sent >= spans:
        return summary, ""
    return summary, (
        f"{spans - sent} of {spans} spans did not reach {endpoint}: check the endpoint and "
        "--protocol, and that it answers (the exporter's messages above say why)"
    )


class _EndpointMetricExporter(MetricExporter):
    """Forwards to a metric exporter, skipping an endpoint that is down (metrics are resent
    cumulatively at the next interval, so a skipped export loses no count)."""

    def __init__(self, inner: MetricExporter, endpoint: Endpoint) -> None:
        super().__init__(inner._preferred_temporality, inner._preferred_aggregation)
        self._inner = inner
        self._endpoint = endpoint

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if not self._endpoint.should_try():
            return MetricExportResult.FAILURE
        result = self._inner.export(metrics_data, timeout_millis, **kwargs)
        self._endpoint.answered(result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis, **kwargs)


class _CountingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting every span it drops: those a full queue or its
    shutdown refuses, and those its shutdown's timeout leaves unexported. A full queue drops
    the new span, not the oldest (so the SDK neither warns nor counts it in its own metrics;
    ``DropCounter`` does)."""

    stream = ""
    queue_fix = ""
    """How to make the queue bigger, for the drop message."""

    def __init__(self, exporter: SpanExporter, drops: DropCounter, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._drops = drops
        self._adding = threading.Lock()
        self._closed = False  # set under ``_adding``, before the SDK's own flag
        renew_locks_in_child(self, "_adding")

    def _queue(self, span: ReadableSpan) -> bool:
        """Queue ``span``, or count it dropped; whether it was queued.

        Spans are added under a lock and the SDK's export thread only takes from the queue,
        so a queue found full stays full until the add: each count is a span really dropped.
        The SDK sets its shutdown flag without a lock: ``_closed``, set under this one, keeps
        a span from being added between its check and the add, and lost uncounted.
        """
        batch = self._batch_processor
        with self._adding:
            if self._closed:
                reason, why = "already_shutdown", "the pipeline was shut down"
            elif len(batch._queue) >= batch._max_queue_size:
                reason, why = "queue_full", f"the export queue was full ({self.queue_fix})"
            else:
                super().on_end(span)
                return True
        self._drops.add(self.stream, reason, 1, why)  # not under the lock: it may log
        return False

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop taking spans, export those queued, count those the timeout left in the queue
        or in an export."""
        with self._adding:
            if self._closed:  # the provider's own shutdown, after Telemetry.shutdown's
                return
            self._closed = True
        batch = self._batch_processor
        batch.shutdown(timeout_millis)
        left = len(batch._queue)  # the export thread takes no more after a timeout
        if isinstance(batch._exporter, CountingSpanExporter):
            left += batch._exporter.abandon_in_flight()
        if left:
            why = "the export did not finish by the shutdown's deadline"
            self._drops.add(self.stream, "shutdown_timeout", left, why)


class RequestSpanProcessor(_CountingBatchProcessor):
    """The SDK's batch processor for the tracer's spans.

    Profile spans never reach it (:class:`otel_ort.export.delivery.SpanDelivery` skips it), so a
    profile burst cannot fill its queue.
    """

    takes_profile_spans = False
    stream = "requests"
    queue_fix = "raise OTEL_BSP_MAX_QUEUE_SIZE"

    def __init__(
        self, exporter: SpanExporter, drops: DropCounter, batching: Batching | None = None
    ) -> None:
        batching = batching or Batching.from_environment()
        super().__init__(
            exporter,
            drops,
            max_queue_size=batching.queue_size,
            max_export_batch_size=batching.batch_size,
            schedule_delay_millis=batching.delay_ms,
        )

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._queue(span)


@dataclass(frozen=True)
class Batching:
    """The ``OTEL_BSP_*`` settings of the batch processors (the profile queue has its own size)."""

    queue_size: int
    batch_size: int
    delay_ms: int

    @classmethod
    def from_environment(cls) -> Batching:
        """What the SDK reads, and what it would refuse without naming the variable, named."""
        queue, batch = "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
        batching = cls(
            _whole(queue, 2048), _whole(batch, 512), _whole("OTEL_BSP_SCHEDULE_DELAY", 5000)
        )
        if batching.batch_size > batching.queue_size:
            raise ValueError(
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batching.batch_size}{_given(batch)} is more "
                f"than OTEL_BSP_MAX_QUEUE_SIZE={batching.queue_size}{_given(queue)}: a batch "
                "must fit in the queue"
            )
        return batching


def _given(variable: str) -> str:
    return "" if os.environ.get(variable, "").strip() else " (the default)"


def _whole(variable: str, default: int) -> int:
    """``variable`` as a whole number: ``default`` with a warning, as the SDK does, where it is
    not one; a ``ValueError`` naming it where it is below 1 (the SDK's error does not)."""
    value = os.environ.get(variable, "").strip()
    try:
        number = int(value) if value else default
    except ValueError:
        _logger.warning(
            "otel-ort: %s=%r is not a whole number: using the SDK's default, %d",
            variable,
            value,
            default,
        )
        return default
    if number < 1:
        raise ValueError(f"{variable}={value!r} must be at least 1 (the SDK's default: {default})")
    return number


def _check_export_timeouts(traces: bool, metrics: bool) -> None:
    """The timeout variables of the OTLP exporters made: a ``ValueError`` naming one that is
    not a number of seconds; a warning where one reads as more than 10 minutes (OpenTelemetry
    Python reads seconds where the specification says milliseconds)."""
    made = (("", traces or metrics), ("TRACES_", traces), ("METRICS_", metrics))
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}TIMEOUT" for signal, is_made in made if is_made):
        value = os.environ.get(variable, "").strip()
        if not value:
            continue
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds < math.inf:
            raise ValueError(
                f"{variable}={value!r} is not a number of seconds above 0 (OpenTelemetry "
                "Python's OTLP exporters read it in seconds; their default is 10)"
            )
        if seconds > 600:
            _logger.warning(
                "otel-ort: %s=%s is read as %g seconds by OpenTelemetry Python's OTLP "
                "exporters (the specification says milliseconds): an export to a collector "
                "that is down may wait that long",
                variable,
                value,
                seconds,
            )


@dataclass
class Telemetry:
    """What :func:`configure` set up."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    drops: DropCounter
    target: str
    """Where spans go (for messages)."""
    protocol: Protocol
    endpoints: Sequence[Endpoint] = ()
    """One per exporter: a signal or stream that fails pauses only its own exports (at
    shutdown, a target found down is given up by every exporter sending to it)."""
    processors: Sequence[_CountingBatchProcessor | ProfileExportProcessor] = ()
    """The span processors of the exporters, shut down within ``shutdown``'s timeout."""
    _shut_down: bool = False

    def dropped(self) -> dict[str, int]:
        """Spans dropped so far, ``"<stream>.<reason>"`` → count (also the metric)."""
        return self.drops.counts()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Convert pending profiles, flush and stop both providers, log what was dropped, all
        within ``timeout`` seconds, plus up to 0.5 s to count what is left and stop the
        metrics reader (span processors you added to the provider get the SDK's own 30 s
        each).

        Runs at interpreter exit too. An endpoint that is down is not tried again (what is
        still queued is counted as dropped).
        """
        if self._shut_down:
            return
        self._shut_down = True
        atexit.unregister(self.shutdown)
        from otel_ort.instrumentation import wait_for_profiles

        deadline = time.monotonic() + timeout
        self._give_up_targets_down()
        wait_for_profiles(timeout)  # the run spans of profiled runs end in the profile worker
        # together: against a collector that is down each waits out its export's retries;
        # each returns by the deadline, then counts what it left (given a moment for that)
        shutdowns = [partial(_shut_down_by, p, deadline) for p in self.processors]
        grace = seconds_left(deadline) + _GRACE_S
        if not call_within(
            shutdowns, grace, "a span processor's shutdown", "otel-ort-shutdown"
        ).finished:
            _logger.warning(
                "otel-ort: a span processor's shutdown had not finished %g s after its "
                "deadline: what it drops later is counted in %s but not logged",
                _GRACE_S,
                semconv.METRIC_SPANS_DROPPED,
            )
        self._give_up_targets_down()  # the last metric export skips a target spans found down
        self.tracer_provider.shutdown()  # ours are shut down: it waits for processors you added
        try:  # even past the deadline: a reader the SDK gives no time is never stopped
            self.meter_provider.shutdown(
                timeout_millis=max(_millis_left(deadline), int(_GRACE_S * 1000))
            )
        except Exception as exc:  # the SDK raises when a reader's last export did not finish
            _logger.warning("otel-ort: the last metrics were not exported at shutdown: %s", exc)
        self.drops.log()

    def _give_up_targets_down(self) -> None:
        """Every exporter gives up a target that one of them found down."""
        down = {endpoint.target for endpoint in self.endpoints if endpoint.down}
        for endpoint in self.endpoints:
            endpoint.give_up(endpoint.target in down)


def _shut_down_by(
    processor: _CountingBatchProcessor | ProfileExportProcessor, deadline: float
) -> None:
    processor.shutdown(_millis_left(deadline))  # the time left when it starts


def _millis_left(deadline: float) -> int:
    return int(seconds_left(deadline) * 1000)


def configure(
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | str | None = None,
    insecure: bool | None = None,
    *,
    profile_queue_size: int = PROFILE_QUEUE_SIZE,
    metrics_export: bool | None = None,
    metric_readers: Sequence[MetricReader] = (),
    set_global: bool = True,
) -> Telemetry:
    """Export traces and metrics over OTLP, and make them the global providers.

    Every argument left ``None`` falls back to the standard variable (``OTEL_SERVICE_NAME``,
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``..._PROTOCOL``, ``..._HEADERS``,
    ``..._INSECURE``; ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``,
    ``OTEL_METRIC_EXPORT_INTERVAL``), then to OTLP/gRPC on ``localhost:4317``. For HTTP,
    ``endpoint`` is the base URL (``http://host:4318``): ``/v1/traces`` and ``/v1/metrics``
    are added. ``headers`` is a mapping or ``key=value,...`` (values percent-decoded, keys
    lower-cased). ``metrics_export=False`` (or ``OTEL_METRICS_EXPORTER=none``) keeps metrics in
    the process (for backends that take traces only), ``OTEL_TRACES_EXPORTER=none`` exports
    no spans; another exporter than ``otlp`` in either variable is refused (a separate
    pipeline, ``set_global=False``, does not read them). ``metric_readers`` are added to the
    meter provider (a Prometheus reader, an in-memory one). Under ``opentelemetry-instrument``
    this is not needed (and refused).
    """
    chosen = _protocol(protocol, "traces")
    if profile_queue_size < 1:
        raise ValueError(f"profile_queue_size must be at least 1, got {profile_queue_size}")
    header_dict = _headers(headers)
    batching = Batching.from_environment()
    if set_global and isinstance(trace.get_tracer_provider(), TracerProvider):
        raise RuntimeError(
            "otel_ort.configure(): an OpenTelemetry SDK tracer provider is already set (by "
            "an earlier configure(), opentelemetry-instrument or your code); keep one set-up "
            "(configure() once, at start-up), or call configure(set_global=False) for a "
            "separate pipeline"
        )
    # the exporter variables describe the process's pipeline, not a separate one
    traces_export = _exports("OTEL_TRACES_EXPORTER") if set_global else True
    if metrics_export is None:
        metrics_export = _exports("OTEL_METRICS_EXPORTER") if set_global else True
    _check_export_timeouts(traces_export, metrics_export)
    # first: a bad metrics protocol must fail before any exporter thread starts
    metric_protocol = _protocol(protocol, "metrics") if metrics_export else chosen
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    target = _target(chosen, endpoint, "traces")
    endpoints: list[Endpoint] = []
    drops = DropCounter()
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processors: list[_CountingBatchProcessor | ProfileExportProcessor] = []
    for stream in ("requests", "profiles") if traces_export else ():
        inner = (  # profile spans go out encoded by otel-ort, through the SDK's transport
            _otlp_exporter("traces", chosen, endpoint, header_dict, insecure)
            if stream == "requests"
            else encoded_span_exporter(chosen, endpoint, header_dict, insecure)
        )
        endpoints.append(Endpoint(target))
        exporter = CountingSpanExporter(cast(SpanExporter, inner), endpoints[-1], drops, stream)
        processors.append(
            RequestSpanProcessor(exporter, drops, batching)
            if stream == "requests"
            else ProfileExportProcessor(
                exporter,
                ProtobufSpans(),
                drops,
                queue_size=profile_queue_size,
                batch_size=batching.batch_size,
                delay_ms=batching.delay_ms,
            )
        )
        tracer_provider.add_span_processor(processors[-1])
    readers = list(metric_readers)
    if metrics_export:  # last: its reader starts a thread
        inner = _otlp_exporter("metrics", metric_protocol, endpoint, header_dict, insecure)
        endpoints.append(Endpoint(_target(metric_protocol, endpoint, "metrics")))
        metric_exporter = _EndpointMetricExporter(cast(MetricExporter, inner), endpoints[-1])
        readers.append(PeriodicExportingMetricReader(metric_exporter))
    meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, shutdown_on_exit=False
    )
    drops.measure_with(meter_provider)
    telemetry = Telemetry(
        tracer_provider, meter_provider, drops, target, chosen, endpoints, processors
    )
    atexit.register(telemetry.shutdown)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return telemetry


def otlp_span_exporter(protocol: str, endpoint: str | None = None) -> SpanExporter:
    """The standard OTLP span exporter for ``protocol``; ``endpoint`` ``None``: from the env."""
    return cast(SpanExporter, _otlp_exporter("traces", protocol, endpoint, None, None))


def _otlp_exporter(
    signal: Literal["traces", "metrics"],
    protocol: str,
    endpoint: str | None,
    headers: dict[str, str] | None,
    insecure: bool | None,
) -> SpanExporter | MetricExporter:
    """The standard OTLP exporter of ``signal``; ``None`` arguments come from the env."""
    module = f"opentelemetry.exporter.otlp.proto.{'grpc' if protocol == 'grpc' else 'http'}"
    submodule, class_name = _EXPORTERS[signal]
    exporter_class = getattr(importlib.import_module(f"{module}.{submodule}"), class_name)
    exporter: SpanExporter | MetricExporter
    if protocol == "grpc":
        exporter = exporter_class(endpoint=endpoint, headers=headers, insecure=insecure)
    else:
        exporter = exporter_class(endpoint=_http_url(endpoint, signal), headers=headers)
    return exporter


def _http_url(endpoint: str | None, signal: str) -> str | None:
    """A base URL given by the caller gets ``/v1/<signal>`` (in place of another signal's
    path it ends with); ``None`` leaves it to the env."""
    if endpoint is None:
        return None
    base = endpoint.rstrip("/")
    for path in ("/v1/traces", "/v1/metrics"):
        base = base.removesuffix(path)
    return f"{base}/v1/{signal}"


def _protocol(given: str | None, signal: Literal["traces", "metrics"]) -> Protocol:
    """``given``, else the signal's ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else gRPC."""
    value, source = given, "protocol="
    for variable in (
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        if not value:
            value, source = os.environ.get(variable), variable
    for protocol in PROTOCOLS:
        if (value or "grpc").strip() == protocol:
            return protocol
    raise ValueError(
        f"OTLP protocol {value!r} ({source}) is not supported: use one of {', '.join(PROTOCOLS)}"
    )


def _exports(variable: str) -> bool:
    """Whether ``variable`` (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``) lets
    ``configure()`` export its signal: ``otlp`` or unset yes, ``none`` no, else an error."""
    value = os.environ.get(variable, "").strip()
    name = value.lower()
    if name in ("", "otlp"):
        return True
    if name == "none":
        return False
    if name in ("otlp_proto_grpc", "otlp_proto_http"):
        fix = (
            "write otlp and choose the protocol with protocol= or OTEL_EXPORTER_OTLP_PROTOCOL "
            "(grpc, http/protobuf)"
        )
    else:
        fix = (
            "one value, not a list; for other exporters leave configure() out and run under "
            "opentelemetry-instrument, which sets up any exporter"
        )
    raise ValueError(f"{variable}={value!r}: otel_ort.configure() takes otlp or none: {fix}")


def _target(protocol: Protocol, endpoint: str | None, signal: str) -> str:
    """Where a signal goes, for messages: the endpoint as given or as the environment sets it."""
    given = (
        endpoint
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if given:
        return given
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"


def _headers(headers: Mapping[str, str] | str | None) -> dict[str, str] | None:
    """Headers as gRPC and HTTP both take them: lower-case keys; ``k=v,k2=v2`` (the
    ``OTEL_EXPORTER_OTLP_HEADERS`` form, values percent-decoded) or a mapping."""
    if headers is None:
        return None
    if not isinstance(headers, str):
        return {key.strip().lower(): value for key, value in headers.items()}
    parsed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in headers.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"OTLP header {item!r} is not key=value: write headers as k=v,k2=v2")
        parsed[key.strip().lower()] = urllib.parse.unquote(value.strip())
    return parsed

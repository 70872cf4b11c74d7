"""``configure()``: OTLP export for processes without their own OpenTelemetry SDK set-up, and
the ``Telemetry`` it returns.

Request spans (every ``onnxruntime.run`` and the caller's own spans) and profile spans (the
node and kernel spans of a profiled run, delivered in bursts of thousands) go through two
separate batch processors, each with its own queue and exporter, so a burst can never evict a
request span. Profile spans are delivered with back-pressure (:mod:`otel_ort.export.delivery`) and
are not dropped by their queue; request spans that find their queue full are. Every span that
is dropped, by a full queue or by a failed export, is counted in the ``otel_ort.spans.dropped``
metric and logged (:mod:`otel_ort.export.drops`). An endpoint that fails is paused
(:mod:`otel_ort.export.endpoint`).
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import cast

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from otel_ort import semconv
from otel_ort._util.bounded import call_within, seconds_left
from otel_ort.export.drops import DropCounter
from otel_ort.export.endpoint import CountingSpanExporter, Endpoint, EndpointMetricExporter
from otel_ort.export.otlp_encoding import ProtobufSpans
from otel_ort.export.otlp_exporters import otlp_exporter
from otel_ort.export.otlp_transport import encoded_span_exporter
from otel_ort.export.processors import CountingBatchProcessor, RequestSpanProcessor
from otel_ort.export.profile_export import ProfileExportProcessor
from otel_ort.export.settings import (
    Batching,
    Protocol,
    check_export_timeouts,
    chosen_protocol,
    exported,
    parsed_headers,
    target_of,
)

_logger = logging.getLogger("otel_ort")

PROFILE_QUEUE_SIZE = 8192
"""Profile spans held for export (about 2-3 KiB each): a few profiled runs' worth."""

_GRACE_S = 0.5
"""At shutdown, how long past the deadline a span processor may take to count what it left,
and at least what the meter provider gets to stop its readers."""

_waits_before_shutdown: list[Callable[[float], object]] = []


def wait_before_shutdown(wait: Callable[[float], object]) -> None:
    """Have every ``Telemetry.shutdown`` call ``wait(seconds)`` first, with the seconds left
    of its timeout: the instrumentation registers the wait for profiled runs being converted
    (their run spans end in the profile worker), so that this module need not import the
    instrumentor. A wait registered twice is called once."""
    if wait not in _waits_before_shutdown:
        _waits_before_shutdown.append(wait)


Processor = CountingBatchProcessor | ProfileExportProcessor
"""The span processors ``configure()`` adds: request spans' and profile spans'."""


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
    processors: Sequence[Processor] = ()
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
        still queued is counted as dropped). Under uvicorn (and gunicorn's uvicorn workers)
        a SIGTERM ends the process without running exit handlers, so call it at the end of
        the app's lifespan (docs/export.md says more).
        """
        if self._shut_down:
            return
        self._shut_down = True
        atexit.unregister(self.shutdown)
        deadline = time.monotonic() + timeout
        self._give_up_targets_down()
        for wait in _waits_before_shutdown:  # profiled runs' spans end in the profile worker
            wait(seconds_left(deadline))
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


def _shut_down_by(processor: Processor, deadline: float) -> None:
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
    chosen = chosen_protocol(protocol, "traces")
    if profile_queue_size < 1:
        raise ValueError(f"profile_queue_size must be at least 1, got {profile_queue_size}")
    header_dict = parsed_headers(headers)
    batching = Batching.from_environment()
    if set_global and isinstance(trace.get_tracer_provider(), TracerProvider):
        raise RuntimeError(
            "otel_ort.configure(): an OpenTelemetry SDK tracer provider is already set (by "
            "an earlier configure(), opentelemetry-instrument or your code); keep one set-up "
            "(configure() once, at start-up), or call configure(set_global=False) for a "
            "separate pipeline"
        )
    # the exporter variables describe the process's pipeline, not a separate one
    traces_export = exported("OTEL_TRACES_EXPORTER") if set_global else True
    if metrics_export is None:
        metrics_export = exported("OTEL_METRICS_EXPORTER") if set_global else True
    check_export_timeouts(traces_export, metrics_export)
    # first: a bad metrics protocol must fail before any exporter thread starts
    metric_protocol = chosen_protocol(protocol, "metrics") if metrics_export else chosen
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    target = target_of(chosen, endpoint, "traces")
    endpoints: list[Endpoint] = []
    drops = DropCounter()
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processors: list[Processor] = []
    for stream in ("requests", "profiles") if traces_export else ():
        inner = (  # profile spans go out encoded by otel-ort, through the SDK's transport
            otlp_exporter("traces", chosen, endpoint, header_dict, insecure)
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
        inner = otlp_exporter("metrics", metric_protocol, endpoint, header_dict, insecure)
        endpoints.append(Endpoint(target_of(metric_protocol, endpoint, "metrics")))
        metric_exporter = EndpointMetricExporter(cast(MetricExporter, inner), endpoints[-1])
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

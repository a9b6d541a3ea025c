"""The monitoring: the rules pass promtool and its unit tests; the dashboards are selectable by
data source, namespace, pod and model; and a real Prometheus (Debian's package) scraping
the real local Triton (with the summary latencies the deployments enable) gets data for
every recording rule, every dashboard panel query and the HPA adapters' queries under load:
the embedding model's from a server without the LLM, the LLM's from one serving it."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import start_triton
from tests.ops.conftest import DOCKER_DIR, K8S_DIR, MONITORING_DIR, run, system_tool
from tests.ops.prometheus_server import PROMETHEUS_DIR, query, running_prometheus, wait_for_data
from tools.embed import EmbeddingClient
from tools.serve.local_triton import ServerOptions

DASHBOARD = MONITORING_DIR / "grafana" / "dashboards" / "triton-dynamic-batching.json"
GPU_ONLY = re.compile(r"\bnv_gpu_")  # Triton exports these only on GPU hosts
VARIABLES = ("$namespace", "$pod", "$model")
EMBED_GROUPS = ("triton-recording", "triton-alerts")  # the rest of the file (llm-*) is the LLM's
integration = pytest.mark.integration


def rules(kind: str, groups: tuple[str, ...] | None = EMBED_GROUPS) -> list[str]:
    """The names of the recording rules (kind "record") or alerts (kind "alert") of the
    embedding model's groups (or of `groups`; None: every group)."""
    loaded = yaml.safe_load((PROMETHEUS_DIR / "rules" / "triton.yml").read_text())["groups"]
    return [rule[kind] for group in loaded if groups is None or group["name"] in groups for rule in group["rules"] if kind in rule]


def recording_rules() -> list[str]:
    return rules("record")


def panel_queries(dashboard_path: Path = DASHBOARD) -> list[str]:
    dashboard = json.loads(dashboard_path.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def as_grafana_sends_all(queries: list[str]) -> list[str]:
    """The queries with every template variable set to "All"."""
    for variable in VARIABLES:
        queries = [expr.replace(variable, ".*") for expr in queries]
    return queries


def summary_latencies_flag() -> str:
    """The flag as the compose stack passes it (the Deployment's is checked equal in test_kubernetes)."""
    command = yaml.safe_load((DOCKER_DIR / "compose.yaml").read_text())["services"]["triton"]["command"]
    (flag,) = [arg for arg in command if arg.startswith("--metrics-config=summary_latencies")]
    return flag


def adapter_query() -> str:
    """The HPA's metric exactly as the Prometheus adapter would run it for our scrape job."""
    rule = yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())["rules"]["custom"][0]
    return rule["metricsQuery"].replace("<<.GroupBy>>", "instance").replace("<<.LabelMatchers>>", 'job="triton"')


def test_the_dashboard_selects_data_source_namespace_pod_and_model() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pod", "model"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert variables[name]["allValue"] == ".*", "matches the compose stack's series, which have no namespace/pod"
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"])
    per_pod = [expr for expr in panel_queries() if "triton:latency_slo_us" not in expr]
    assert all('namespace=~"$namespace"' in expr and 'pod=~"$pod"' in expr for expr in per_pod), per_pod


def test_the_dashboard_shows_the_slo_percentile_the_alert_watches() -> None:
    queries = " ".join(panel_queries())
    assert "instance:triton_embed_request_p99_us:summary" in queries and "triton:latency_slo_us" in queries
    assert {"TritonLatencyP99AboveSLO", "TritonDown", "TritonModelNotReady"} <= set(rules("alert"))


def test_rules_and_config_pass_promtool() -> None:
    promtool = system_tool("promtool", "prometheus")
    tests = ["triton-alerts.test.yml", "llm-alerts.test.yml"]
    for command in (["check", "config", str(PROMETHEUS_DIR / "prometheus.yml")], ["test", "rules", *tests]):
        result = run([promtool, *command], cwd=PROMETHEUS_DIR / "tests")
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def monitored_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerOptions]:
    """Triton as the deployments run it for monitoring: with Triton's summary latencies."""
    server = start_triton(tmp_path_factory.mktemp("monitored") / "triton.log", extra_args=(summary_latencies_flag(),))
    try:
        yield server.options
    finally:
        server.stop()


@pytest.fixture(scope="module")
def prometheus(monitored_triton: ServerOptions, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus with the committed config and rules, aimed at the test Triton, 1 s intervals."""
    with running_prometheus(monitored_triton, tmp_path_factory.mktemp("prometheus")) as base:
        yield base


@pytest.fixture(scope="module")
def loaded_prometheus(prometheus: str, monitored_triton: ServerOptions) -> Iterator[str]:
    """Keeps a little concurrent load (fresh and repeated texts) on Triton while the tests query."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def drive(worker: int) -> None:
        client = EmbeddingClient("http", monitored_triton.http_url)
        count = 0
        try:
            while not stop.is_set():
                text = "a repeated text for the response cache" if count % 3 == 0 else f"worker {worker} text {count} {time.time()}"
                client.embed([text])
                count += 1
        except BaseException as exc:  # surfaced by the tests below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        yield prometheus
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors


@integration
def test_prometheus_scrapes_triton(loaded_prometheus: str) -> None:
    targets = wait_for_data(loaded_prometheus, ['up{job="triton"} == 1'])
    assert targets


@integration
def test_every_recording_rule_returns_data_under_load(loaded_prometheus: str) -> None:
    results = wait_for_data(loaded_prometheus, recording_rules())
    batch = {series["metric"]["model"]: float(series["value"][1]) for series in results["model:triton_batch_size:avg1m"]}
    assert set(batch) >= {"encoder", "tokenizer"} and all(value >= 1.0 for value in batch.values())


@integration
def test_every_dashboard_panel_query_returns_data_under_load(loaded_prometheus: str) -> None:
    queries = as_grafana_sends_all(panel_queries())
    gpu_only = [expr for expr in queries if GPU_ONLY.search(expr)]
    assert len(gpu_only) == 2, "only the two GPU panels may lack data on a CPU host"
    wait_for_data(loaded_prometheus, [expr for expr in queries if expr not in gpu_only])


@integration
def test_the_slo_percentile_adds_up_the_steps_while_the_ensemble_has_no_summary(loaded_prometheus: str) -> None:
    """Triton disables the request summary of a model with the response cache on (embed):
    the p99 rule then sums tokenizer and encoder, as its comment and the docs say."""
    (p99,) = wait_for_data(loaded_prometheus, ["instance:triton_embed_request_p99_us:summary"]).values()
    steps = query(loaded_prometheus, 'nv_inference_request_summary_us{quantile="0.99"}')
    assert {series["metric"]["model"] for series in steps} == {"tokenizer", "encoder"}
    assert float(p99[0]["value"][1]) > 0


@integration
def test_up_and_model_ready_alerts_stay_quiet_while_triton_serves(loaded_prometheus: str) -> None:
    wait_for_data(loaded_prometheus, ['up{job="triton"} == 1', 'nv_inference_request_success{job="triton",model="embed"}'])
    groups = yaml.safe_load((PROMETHEUS_DIR / "rules" / "triton.yml").read_text())["groups"]
    alerts = {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"] if "alert" in rule}
    assert query(loaded_prometheus, alerts["TritonDown"]) == []
    assert query(loaded_prometheus, alerts["TritonModelNotReady"]) == []


@integration
def test_the_hpa_adapter_query_returns_queue_time_per_request(loaded_prometheus: str) -> None:
    (series,) = wait_for_data(loaded_prometheus, [adapter_query()]).values()
    assert float(series[0]["value"][1]) >= 0.0


@integration
def test_all_rules_load_and_evaluate_without_errors(loaded_prometheus: str) -> None:
    with urllib.request.urlopen(f"{loaded_prometheus}/api/v1/rules", timeout=10) as response:
        groups = json.loads(response.read())["data"]["groups"]
    loaded = [rule for group in groups for rule in group["rules"]]
    assert len(loaded) == len(rules("record", groups=None)) + len(rules("alert", groups=None))
    assert all(rule["health"] in ("ok", "unknown") and not rule.get("lastError") for rule in loaded), loaded


def test_dashboard_file_is_the_one_grafana_provisions() -> None:
    assert Path(DASHBOARD).parent.name == "dashboards"
    assert json.loads(DASHBOARD.read_text())["uid"] == "triton-dynamic-batching"

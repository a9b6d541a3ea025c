"""The LLM's monitoring: its rules and dashboard read only metrics the `llm` model writes
(llm/metrics.py), or NVIDIA's vLLM backend's name for one of them beside ours (the vllm-gpu
variant), its SLO is the LLM benchmark's, and a real Prometheus scraping a real
Triton serving the LLM under streaming load gets data for every LLM recording rule, every
LLM panel query and the HPA adapter's waiting-requests query."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator

import pytest
import yaml

from llm.metrics import FAMILIES
from tests.integration.llm_streams import LlmStream, generate, grpc_inputs
from tests.ops.conftest import K8S_DIR, MONITORING_DIR
from tests.ops.prometheus_server import PROMETHEUS_DIR, query, running_prometheus, wait_for_data
from tests.ops.test_prometheus import VARIABLES, as_grafana_sends_all, panel_queries
from tests.ops.vllm_backend import NVIDIA_ALIASES, NVIDIA_VLLM_FAMILIES
from tools.load.llm.figures import Slo

LLM_DASHBOARD = MONITORING_DIR / "grafana" / "dashboards" / "triton-llm.json"
LLM_GROUPS = ("llm-recording", "llm-alerts")
# Written by the prefix cache (helper llm-sched2's branch), under vLLM's names; until
# llm/metrics.py writes them the prefix-cache rule and panel have no data, by design.
PREFIX_CACHE_METRICS = {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
METRIC = re.compile(r"\b((?:vllm|llm):[a-z0-9_]+)")
HISTOGRAM_SERIES = re.compile(r"_(bucket|count|sum)$")
integration = pytest.mark.integration


def llm_rules() -> list[dict]:
    groups = yaml.safe_load((PROMETHEUS_DIR / "rules" / "triton.yml").read_text())["groups"]
    return [rule for group in groups if group["name"] in LLM_GROUPS for rule in group["rules"]]


def llm_recording_rules() -> dict[str, str]:
    return {rule["record"]: rule["expr"] for rule in llm_rules() if "record" in rule}


def adapter_query() -> str:
    """The HPA's LLM metric exactly as the Prometheus adapter would run it for our scrape job."""
    (rule,) = [
        rule
        for rule in yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())["rules"]["custom"]
        if rule["name"]["as"] == "triton_llm_requests_waiting"
    ]
    return rule["metricsQuery"].replace("<<.GroupBy>>", "instance").replace("<<.LabelMatchers>>", 'job="triton"')


def metrics_read(expr: str) -> set[str]:
    """The llm's metric families an expression reads (a histogram's _bucket is its family)."""
    return {HISTOGRAM_SERIES.sub("", name) for name in METRIC.findall(expr)}


def ours_read(expr: str) -> set[str]:
    """The families an expression reads under our names (NVIDIA's backend's aliases left out)."""
    return metrics_read(expr) - set(NVIDIA_ALIASES)


def exported(expressions: list[str]) -> list[str]:
    """The expressions whose every metric llm/metrics.py writes today."""
    return [expr for expr in expressions if ours_read(expr) <= set(FAMILIES)]


def test_the_llm_dashboard_selects_data_source_namespace_pod_and_model() -> None:
    dashboard = json.loads(LLM_DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pod", "model"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert variables[name]["allValue"] == ".*", "matches the compose stack's series, which have no namespace/pod"
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"])
    per_pod = [expr for expr in panel_queries(LLM_DASHBOARD) if metrics_read(expr)]
    assert all(all(variable[1:] + '=~"' + variable in expr for variable in VARIABLES) for expr in per_pod), per_pod


def test_the_llm_dashboard_shows_latencies_load_kv_preemptions_prefix_hits_and_tokens() -> None:
    shown = set().union(*(metrics_read(expr) for expr in panel_queries(LLM_DASHBOARD)))
    assert shown >= {
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        *PREFIX_CACHE_METRICS,
    }
    queries = " ".join(panel_queries(LLM_DASHBOARD))
    assert "triton:llm_ttft_slo_seconds" in queries and "triton:llm_itl_slo_seconds" in queries


def test_the_llm_rules_and_dashboard_read_only_metrics_the_llm_writes() -> None:
    """A renamed metric would leave a panel or an alert silently empty. NVIDIA's backend's own
    name for one of ours is read only beside ours (`ours or theirs`), never instead of it."""
    expressions = [rule["expr"] for rule in llm_rules()] + panel_queries(LLM_DASHBOARD)
    read = set().union(*(ours_read(expr) for expr in expressions))
    assert read <= set(FAMILIES), read - set(FAMILIES)
    for expr in expressions:
        for theirs in metrics_read(expr) & set(NVIDIA_ALIASES):
            assert NVIDIA_ALIASES[theirs] in metrics_read(expr) and " or " in expr, expr


def test_the_latency_and_token_rules_and_panels_also_read_nvidias_vllm_backend() -> None:
    """Served by NVIDIA's Triton vLLM container (the vllm-gpu variant), TTFT, inter-token and
    end-to-end latency and the token rates keep their data: the SLO alerts work there too."""
    assert set(NVIDIA_ALIASES.values()) <= set(FAMILIES) and set(NVIDIA_ALIASES) <= NVIDIA_VLLM_FAMILIES
    theirs = {NVIDIA_ALIASES.get(name, name) for name in NVIDIA_VLLM_FAMILIES}
    records = llm_recording_rules()
    served = {name for name, expr in records.items() if metrics_read(expr) and ours_read(expr) <= theirs}
    assert served >= {
        "model:llm_time_to_first_token_seconds:p99_5m",
        "model:llm_inter_token_latency_seconds:p99_5m",
        "model:llm_e2e_request_latency_seconds:p99_5m",
        "model:llm_prompt_tokens:rate1m",
        "model:llm_generation_tokens:rate1m",
    }
    itl_panel = [expr for expr in panel_queries(LLM_DASHBOARD) if "vllm:inter_token_latency_seconds" in expr]
    assert itl_panel and all("vllm:time_per_output_token_seconds_bucket" in expr for expr in itl_panel)


def test_the_llm_slo_in_the_rules_is_the_llm_benchmarks_default() -> None:
    records = llm_recording_rules()
    ttft = float(re.fullmatch(r"vector\((.+)\)", records["triton:llm_ttft_slo_seconds"].strip()).group(1))
    itl = float(re.fullmatch(r"vector\((.+)\)", records["triton:llm_itl_slo_seconds"].strip()).group(1))
    assert (ttft, itl) == (Slo().ttft_s, Slo().tpot_s)


def test_the_llm_alerts_watch_ttft_waiting_requests_and_the_kv_cache() -> None:
    alerts = {rule["alert"]: rule for rule in llm_rules() if "alert" in rule}
    assert {"LlmTimeToFirstTokenP99AboveSLO", "LlmWaitingRequestsGrowing", "LlmKvCacheAlmostFull"} <= set(alerts)
    assert "triton:llm_ttft_slo_seconds" in alerts["LlmTimeToFirstTokenP99AboveSLO"]["expr"]
    assert all(alert["for"] for alert in alerts.values()), "no LLM alert fires on a single evaluation"


@pytest.fixture(scope="module")
def llm_prometheus(llm_triton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus scraping the LLM's Triton while two clients stream short answers."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def drive(worker: int) -> None:
        count = 0
        try:
            while not stop.is_set():
                prompt = f"Worker {worker}, request {count}: name a color."
                body = {"text_input": prompt, "sampling_parameters": json.dumps({"max_tokens": 8})}
                status, events = generate(llm_triton.options.http_url, body, stream=True, timeout_s=120)
                if status != 200:
                    raise AssertionError(f"generate_stream answered {status}: {events}")
                count += 1
        except BaseException as exc:  # surfaced by the fixture's teardown
            errors.append(exc)

    with running_prometheus(llm_triton.options, tmp_path_factory.mktemp("llm-prometheus")) as base:
        threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(2)]
        for thread in threads:
            thread.start()
        try:
            yield base
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
    assert not errors, errors


@integration
def test_every_llm_recording_rule_returns_data_under_load(llm_prometheus: str) -> None:
    records = llm_recording_rules()
    assert exported(list(records.values())) == list(records.values())
    wait_for_data(llm_prometheus, list(records), timeout_s=120)
    # A percentile is NaN until a request has finished inside its window; `> 0` waits for a number.
    measured = ["model:llm_time_to_first_token_seconds:p99_5m > 0", "model:llm_generation_tokens:rate1m > 0"]
    for (series,) in wait_for_data(llm_prometheus, measured, timeout_s=120).values():
        assert series["metric"]["model"] == "llm"


@integration
def test_every_llm_panel_query_returns_data_under_load(llm_prometheus: str) -> None:
    queries = as_grafana_sends_all(panel_queries(LLM_DASHBOARD))
    wait_for_data(llm_prometheus, exported(queries), timeout_s=120)


@integration
def test_the_hpa_adapter_query_returns_the_waiting_llm_requests(llm_prometheus: str) -> None:
    (series,) = wait_for_data(llm_prometheus, [adapter_query()], timeout_s=120).values()
    assert float(series[0]["value"][1]) >= 0.0


@integration
def test_the_kv_preemption_and_waiting_alerts_stay_quiet_at_a_light_load(llm_prometheus: str) -> None:
    wait_for_data(llm_prometheus, ["model:llm_kv_cache_usage:max1m"], timeout_s=120)
    alerts = {rule["alert"]: rule["expr"] for rule in llm_rules() if "alert" in rule}
    for name in ("LlmKvCacheAlmostFull", "LlmPreemptionsSustained", "LlmWaitingRequestsGrowing"):
        assert query(llm_prometheus, alerts[name]) == [], name


def test_the_llm_dashboard_sits_beside_the_other_in_the_provisioned_folder_with_its_own_uid() -> None:
    dashboards = sorted(LLM_DASHBOARD.parent.glob("*.json"))
    assert LLM_DASHBOARD in dashboards and len(dashboards) >= 2
    uids = [json.loads(path.read_text())["uid"] for path in dashboards]
    assert len(set(uids)) == len(uids) and json.loads(LLM_DASHBOARD.read_text())["uid"] == "triton-llm"


@integration
def test_the_hpa_metric_rises_while_requests_wait_for_a_running_slot(llm_triton, llm_prometheus: str) -> None:
    """More streams than `max_num_seqs` (16, committed) make requests wait; the adapter's
    metric, which the HPA scales on, must then be above zero. Cancelling frees them."""
    max_num_seqs = int(llm_triton.client.config("llm").parameters["max_num_seqs"].string_value)
    stream = LlmStream(llm_triton.options.grpc_url)
    try:
        for _ in range(max_num_seqs + 4):
            stream.send(grpc_inputs("Count to a thousand.", sampling={"max_tokens": 256, "ignore_eos": True}))
        wait_for_data(llm_prometheus, ["vllm:num_requests_waiting > 0"], timeout_s=120)  # precondition, as the server says
        (series,) = wait_for_data(llm_prometheus, [f"({adapter_query()}) > 0"], timeout_s=120).values()
        assert float(series[0]["value"][1]) > 0
    finally:
        stream.close(cancel=True)

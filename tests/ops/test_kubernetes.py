"""deploy/k8s: the Kustomize base and overlays render and pass the Kubernetes schemas, and
what they render is safe to apply: model control needs the key from a Secret, probes check
the model, the HPA owns the replica count, shutdown drains, monitoring is selected."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from llm.metrics import FAMILIES
from tests.ops.conftest import DOCKER_DIR, K8S_DIR, MONITORING_DIR, run, system_tool, venv_tool
from tests.ops.vllm_backend import NVIDIA_VLLM_FAMILIES
from tools.observe.prometheus_rule import OUTPUT as PROMETHEUS_RULE
from tools.observe.prometheus_rule import render as render_prometheus_rule
from tools.serve.admin_key import AdminKeyError, restricted_api_flags, server_command

BASE_FILES = sorted((K8S_DIR / "base").glob("*.yaml"))
LOADER = K8S_DIR / "model-loader" / "pod.yaml"
OPERATOR_DIR = K8S_DIR / "components" / "prometheus-operator"
OVERLAYS = ("base", "overlays/gpu", "overlays/object-store", "overlays/vllm-gpu")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}  # no schema in the validator; checked below


def validate(path) -> str:
    result = run([venv_tool("kubernetes-validate"), "--strict", "--kubernetes-version", "1.30.0", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def render(overlay: str) -> list[dict]:
    """`kubectl kustomize` output; without kubectl, the base's own files (no overlay patches)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if overlay != "base":
            pytest.skip("kubectl (with its built-in kustomize) is not installed; only the base files are checked")
        return [yaml.safe_load(path.read_text()) for path in BASE_FILES if path.name != "kustomization.yaml"]
    rendered = run([kubectl, "kustomize", str(K8S_DIR / overlay)])
    assert rendered.returncode == 0, rendered.stderr
    return list(yaml.safe_load_all(rendered.stdout))


def the(documents: list[dict], kind: str) -> dict:
    (document,) = [doc for doc in documents if doc["kind"] == kind]
    return document


@pytest.mark.parametrize("path", [p for p in BASE_FILES if p.name != "kustomization.yaml"] + [LOADER], ids=lambda p: p.name)
def test_manifest_passes_the_schema(path) -> None:
    validate(path)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlay_passes_the_schema(overlay: str, tmp_path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed; the base files are validated on their own")
    documents = render(overlay)
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    output = validate(path)
    unknown = [line for line in output.splitlines() if "Couldn't find schema" in line]
    assert all(any(kind in line for kind in CRD_KINDS) for line in unknown), unknown
    kinds = {doc["kind"] for doc in documents}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler"} <= kinds
    if overlay != "base":
        assert kinds >= CRD_KINDS


@pytest.fixture(params=OVERLAYS)
def pod_spec(request: pytest.FixtureRequest) -> dict:
    deployment = the(render(request.param), "Deployment")
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count; `replicas` would undo its scale-out on every apply"
    return deployment["spec"]["template"]["spec"]


def triton_container(pod_spec: dict) -> dict:
    """Triton's container (overlays/gpu adds the gateway's beside it)."""
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "triton"]
    return container


def test_model_control_is_restricted_with_the_key_from_a_secret(pod_spec: dict) -> None:
    container = triton_container(pod_spec)
    assert "command" not in container, "the image's entrypoint (tools/serve/admin_key.py) adds the restriction"
    assert "--model-control-mode=explicit" in container["args"]
    (key,) = [env for env in container["env"] if env["name"] == "TRITON_ADMIN_KEY"]
    assert key["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-key", "key": "key"}
    assert "optional" not in key["valueFrom"]["secretKeyRef"], "no Secret must mean no pod, not an open API"
    command = ["tritonserver", *container["args"]]
    assert server_command(command, {"TRITON_ADMIN_KEY": "k"})[-2:] == restricted_api_flags("k")
    with pytest.raises(AdminKeyError):
        server_command(command, {})


def test_probes_check_the_model_not_only_the_server(pod_spec: dict) -> None:
    container = triton_container(pod_spec)
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/models/embed/ready"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/models/embed/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live", "a missing model must not restart-loop a live server"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "--strict-readiness=true" in container["args"]


def test_shutdown_waits_for_endpoints_then_drains_within_the_grace_period(pod_spec: dict) -> None:
    container = triton_container(pod_spec)
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and int(sleep[1]) >= 5
    (exit_timeout,) = [int(arg.split("=")[1]) for arg in container["args"] if arg.startswith("--exit-timeout-secs=")]
    assert pod_spec["terminationGracePeriodSeconds"] > int(sleep[1]) + exit_timeout


def test_triton_exports_the_summary_latencies_the_slo_alert_reads(pod_spec: dict) -> None:
    container = triton_container(pod_spec)
    assert "--metrics-config=summary_latencies=true" in container["args"]
    rules = (MONITORING_DIR / "prometheus" / "rules" / "triton.yml").read_text()
    assert "nv_inference_request_summary_us" in rules


def test_the_model_loader_fills_the_volume_every_pod_reads() -> None:
    """The documented way to populate the model volume: a pod that mounts the same claim
    read-write (hence ReadWriteMany), as the uid Triton runs as."""
    documents = render("base")
    claim = the(documents, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod_volumes = {v["name"]: v for v in the(documents, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert pod_volumes["models"]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}
    loader = yaml.safe_load(LOADER.read_text())
    assert loader["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    assert loader["spec"]["securityContext"]["runAsUser"] == 1000
    name = loader["metadata"]["name"]
    steps = LOADER.read_text()
    assert f"cp build/gpu_repository/. {name}:/models/" in steps and f"delete pod {name}" in steps


def test_hpa_scales_on_the_metrics_the_adapter_rules_expose() -> None:
    metrics = yaml.safe_load((K8S_DIR / "base" / "hpa.yaml").read_text())["spec"]["metrics"]
    adapter = yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())
    names = [rule["name"]["as"] for rule in adapter["rules"]["custom"]]
    assert all(metric["type"] == "Pods" for metric in metrics)
    assert [metric["pods"]["metric"]["name"] for metric in metrics] == names


def test_hpa_scales_out_on_waiting_llm_requests_read_from_the_llms_own_gauge() -> None:
    """One HPA for the one Deployment (two would fight over its replicas); the LLM's metric
    is the waiting-requests gauge llm/metrics.py writes, averaged per pod."""
    metrics = yaml.safe_load((K8S_DIR / "base" / "hpa.yaml").read_text())["spec"]["metrics"]
    (llm,) = [m for m in metrics if m["pods"]["metric"]["name"] == "triton_llm_requests_waiting"]
    assert llm["pods"]["target"]["type"] == "AverageValue" and float(llm["pods"]["target"]["averageValue"]) > 0
    adapter = yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())
    (rule,) = [r for r in adapter["rules"]["custom"] if r["name"]["as"] == "triton_llm_requests_waiting"]
    assert "vllm:num_requests_waiting" in FAMILIES and "vllm:num_requests_waiting{" in rule["seriesQuery"]
    assert "vllm:num_requests_waiting{<<.LabelMatchers>>}" in rule["metricsQuery"]
    assert len([doc for doc in render("base") if doc["kind"] == "HorizontalPodAutoscaler"]) == 1


def test_servicemonitor_scrapes_the_metrics_port_as_the_job_the_rules_select() -> None:
    monitor = yaml.safe_load((OPERATOR_DIR / "servicemonitor.yaml").read_text())
    ports = {port["name"] for port in yaml.safe_load((K8S_DIR / "base" / "service.yaml").read_text())["spec"]["ports"]}
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in ports
    assert {"action": "replace", "targetLabel": "job", "replacement": "triton"} in endpoint["relabelings"]
    rules = (MONITORING_DIR / "prometheus" / "rules" / "triton.yml").read_text()
    assert set(re.findall(r'job="([^"]+)"', rules)) == {"triton"}


def test_servicemonitor_and_rules_carry_kube_prometheus_stacks_default_selector_label() -> None:
    """kube-prometheus-stack's Prometheus selects both by `release: <Helm release name>`."""
    monitor = yaml.safe_load((OPERATOR_DIR / "servicemonitor.yaml").read_text())
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_committed_prometheusrule_is_generated_from_the_rule_file() -> None:
    assert PROMETHEUS_RULE.read_text() == render_prometheus_rule(), "run `python -m tools.observe.prometheus_rule` and commit the result"
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    source = yaml.safe_load((MONITORING_DIR / "prometheus" / "rules" / "triton.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]


def test_the_prometheusrule_spec_passes_promtool(tmp_path) -> None:
    promtool = system_tool("promtool", "prometheus")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"]}))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_vllm_overlay_runs_nvidias_vllm_image_on_the_same_volume_with_the_same_probes() -> None:
    """overlays/vllm-gpu: the image of docker/Dockerfile.vllm, the repository at /models (where
    model.json names the checkpoint), the model probes of the base with a longer startup budget."""
    from tools.repo.variant import CONTAINER_REPOSITORY

    documents = render("overlays/vllm-gpu")
    spec = the(documents, "Deployment")["spec"]["template"]["spec"]
    container = triton_container(spec)
    assert container["image"].rsplit(":", 1)[0].endswith("/triton-embed-vllm")
    tag = container["image"].rsplit(":", 1)[1]
    assert re.search(rf"^ARG TRITON_VERSION={re.escape(tag)}$", (DOCKER_DIR / "Dockerfile.vllm").read_text(), re.M)
    (models,) = [mount for mount in container["volumeMounts"] if mount["name"] == "models"]
    assert models["mountPath"] == CONTAINER_REPOSITORY and models["readOnly"] is True
    base = triton_container(the(render("base"), "Deployment")["spec"]["template"]["spec"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == base[probe]["httpGet"]
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 600
    assert any(c["name"] == "gateway" for c in spec["containers"]), "the overlay keeps overlays/gpu's gateway"


def test_the_vllm_overlays_hpa_scales_only_on_metrics_nvidias_backend_lets_the_adapter_serve() -> None:
    """NVIDIA's backend writes no waiting-requests gauge: an HPA metric the adapter cannot serve
    would block every scale-in, so the overlay drops it and keeps the embedding queue time."""
    adapter = {r["name"]["as"]: r for r in yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())["rules"]["custom"]}
    metrics = the(render("overlays/vllm-gpu"), "HorizontalPodAutoscaler")["spec"]["metrics"]
    names = [metric["pods"]["metric"]["name"] for metric in metrics]
    assert names == ["triton_queue_time_us_per_request"]
    assert "vllm:num_requests_waiting" not in NVIDIA_VLLM_FAMILIES and "vllm:" not in adapter[names[0]]["seriesQuery"]

"""deploy/k8s: the Kustomize base and overlays render and pass the Kubernetes schemas."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.ops.conftest import K8S_DIR, run, venv_tool

BASE_FILES = sorted((K8S_DIR / "base").glob("*.yaml"))
OVERLAYS = ("base", "overlays/gpu", "overlays/object-store")


def validate(path) -> str:
    result = run([venv_tool("kubernetes-validate"), "--strict", "--kubernetes-version", "1.30.0", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.parametrize("path", [p for p in BASE_FILES if p.name != "kustomization.yaml"], ids=lambda p: p.name)
def test_base_manifest_passes_the_schema(path) -> None:
    validate(path)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlay_passes_the_schema(overlay: str, tmp_path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed; the base files are validated on their own")
    rendered = run([kubectl, "kustomize", str(K8S_DIR / overlay)])
    assert rendered.returncode == 0, rendered.stderr
    path = tmp_path / "rendered.yaml"
    path.write_text(rendered.stdout)
    output = validate(path)
    unknown = [line for line in output.splitlines() if "Couldn't find schema" in line]
    assert all("ServiceMonitor" in line for line in unknown), unknown  # the one CRD, checked below
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout)}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler"} <= kinds


def load(name: str) -> dict:
    return yaml.safe_load((K8S_DIR / "base" / name).read_text())


def test_pods_ask_for_one_gpu_and_probe_tritons_health_endpoints() -> None:
    container = load("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert {"--model-repository=/models", "--strict-readiness=true"} <= set(container["args"])


def test_hpa_scales_on_the_metric_the_adapter_rule_exposes() -> None:
    metric = load("hpa.yaml")["spec"]["metrics"][0]
    adapter = yaml.safe_load((K8S_DIR / "prometheus-adapter" / "values.yaml").read_text())
    names = [rule["name"]["as"] for rule in adapter["rules"]["custom"]]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] in names


def test_servicemonitor_scrapes_the_services_metrics_port() -> None:
    monitor = yaml.safe_load((K8S_DIR / "components" / "servicemonitor" / "servicemonitor.yaml").read_text())
    ports = {port["name"] for port in load("service.yaml")["spec"]["ports"]}
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert all(endpoint["port"] in ports for endpoint in monitor["spec"]["endpoints"])

"""The gateway in Docker and Kubernetes: its image lints, compose runs it beside Triton, the pod has it with probes."""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from tests.ops.conftest import DOCKER_DIR, K8S_DIR, run, system_tool, venv_tool
from tools.repo.variant import write_variant
from tools.serve.docker_runtime import GATEWAY_COMPOSE_FILE


def test_gateway_dockerfile_passes_hadolint() -> None:
    result = run([venv_tool("hadolint"), str(DOCKER_DIR / "Dockerfile.gateway")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_gateway_image_copies_only_what_its_dockerignore_lets_through() -> None:
    """Every COPY source is allowed by the Dockerfile's own ignore file (context: the repository root)."""
    allowed = {
        line.strip("!/") for line in (DOCKER_DIR / "Dockerfile.gateway.dockerignore").read_text().splitlines() if line.startswith("!")
    }
    copies = [line.split()[1:-1] for line in (DOCKER_DIR / "Dockerfile.gateway").read_text().splitlines() if line.startswith("COPY ")]
    assert copies and all(source.rstrip("/") in allowed for sources in copies for source in sources)


@pytest.fixture(scope="module")
def gateway_compose(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tool = system_tool("docker-compose", "docker-compose")
    repository = tmp_path_factory.mktemp("compose") / "gpu_repository"
    write_variant("gpu", repository)
    env = dict(os.environ, TRITON_MODEL_REPOSITORY=str(repository))
    result = run([tool, "-f", str(DOCKER_DIR / "compose.yaml"), "-f", str(GATEWAY_COMPOSE_FILE), "config"], env=env)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_runs_the_gateway_beside_triton_on_loopback(gateway_compose: dict) -> None:
    gateway = gateway_compose["services"]["gateway"]
    assert "--triton-url=triton:8001" in gateway["command"]
    (port,) = gateway["ports"]
    if isinstance(port, str):  # docker-compose 1.x prints the short form
        assert port.split("/")[0] == "127.0.0.1:8080:8080", port
    else:
        assert (port["host_ip"], int(port["published"]), port["target"]) == ("127.0.0.1", 8080, 8080)
    models = [v for v in gateway["volumes"] if v["target"] == "/models"]
    assert models and models[0]["read_only"] and models[0]["source"] == gateway_compose["services"]["triton"]["volumes"][0]["source"]
    assert "/health" in " ".join(gateway["healthcheck"]["test"])


def rendered_gpu_overlay() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    result = run([kubectl, "kustomize", str(K8S_DIR / "overlays" / "gpu")])
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def test_the_pod_runs_the_gateway_with_readiness_on_tritons_model() -> None:
    documents = rendered_gpu_overlay()
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (gateway,) = [c for c in pod["containers"] if c["name"] == "gateway"]
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert "--triton-url=127.0.0.1:8001" in gateway["args"]
    assert {m["name"] for m in gateway["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
    (triton,) = [c for c in pod["containers"] if c["name"] == "triton"]
    assert gateway["lifecycle"]["preStop"] == triton["lifecycle"]["preStop"], "both stop accepting once endpoints dropped the pod"
    (service,) = [d for d in documents if d["kind"] == "Service"]
    assert {"name": "gateway", "port": 8080, "targetPort": "gateway"} in service["spec"]["ports"]
    (monitor,) = [d for d in documents if d["kind"] == "ServiceMonitor"]
    assert "gateway" in {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}

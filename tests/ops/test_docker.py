"""docker/: the Dockerfile lints clean, the compose file validates, and what it mounts exists."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from tests.ops.conftest import DOCKER_DIR, run, system_tool, venv_tool
from tools.model_config import load_config
from tools.paths import REPO_ROOT
from tools.repository_check import missing_artifacts
from tools.variant import DEFAULT_OUT, write_variant

COMPOSE_FILE = DOCKER_DIR / "compose.yaml"


def test_dockerfile_passes_hadolint() -> None:
    result = run([venv_tool("hadolint"), str(DOCKER_DIR / "Dockerfile")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_pins_an_ngc_triton_tag_the_readme_names() -> None:
    match = re.search(r"^FROM nvcr\.io/nvidia/tritonserver:(\d{2}\.\d{2}-py3)\s*$", (DOCKER_DIR / "Dockerfile").read_text(), re.M)
    assert match, "FROM must pin nvcr.io/nvidia/tritonserver:<yy.mm>-py3"
    assert match.group(1) in (DOCKER_DIR / "README.md").read_text()


def test_container_pins_match_the_project_requirements() -> None:
    """One pin per package: the image's tokenizers is the one the local runtime tests."""
    project = dict(line.split("==") for line in (REPO_ROOT / "requirements.txt").read_text().split() if "==" in line)
    for line in (DOCKER_DIR / "requirements-container.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            assert project.get(name) == version, f"{name}=={version} differs from requirements.txt"


@pytest.fixture(scope="module")
def resolved_compose(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`docker-compose config` output (Debian's docker-compose 1.29; no engine needed)."""
    tool = system_tool("docker-compose", "docker-compose")
    repository = tmp_path_factory.mktemp("compose") / "gpu_repository"
    write_variant("gpu", repository)
    env = dict(os.environ, TRITON_MODEL_REPOSITORY=str(repository))
    quiet = run([tool, "-f", str(COMPOSE_FILE), "config", "-q"], env=env)
    assert quiet.returncode == 0, quiet.stderr
    result = run([tool, "-f", str(COMPOSE_FILE), "config"], env=env)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_reserves_a_gpu_and_mounts_the_models_read_only(resolved_compose: dict) -> None:
    triton = resolved_compose["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "count": 1, "driver": "nvidia"}]
    models = [v for v in triton["volumes"] if v["target"] == "/models"]
    assert models and models[0]["read_only"] is True
    assert sorted(int(str(p).split(":")[-1].split("/")[0]) for p in triton["ports"]) == [8000, 8001, 8002]
    assert "/v2/health/ready" in " ".join(triton["healthcheck"]["test"])
    assert {"prometheus", "grafana"} <= set(resolved_compose["services"])


def test_every_mounted_folder_exists_and_every_model_config_parses(resolved_compose: dict) -> None:
    for name, service in resolved_compose["services"].items():
        for volume in service.get("volumes", []):
            source = Path(volume["source"])
            assert source.exists(), f"{name} mounts {source}, which does not exist"
            if volume["target"] == "/models":
                configs = sorted(source.glob("*/config.pbtxt"))
                assert {path.parent.name for path in configs} == {"embed", "encoder", "tokenizer"}
                for config in configs:
                    load_config(config)  # raises with the file name on a parse error
                assert missing_artifacts(source) == []


def test_compose_default_repository_is_the_generated_gpu_variant() -> None:
    """Without the variable the stack mounts what `tools.variant --kind gpu` writes by default."""
    triton = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triton"]
    source = next(v["source"] for v in triton["volumes"] if v["target"] == "/models")
    default = re.fullmatch(r"\$\{TRITON_MODEL_REPOSITORY:-(.+)\}", source).group(1)
    assert (DOCKER_DIR / default).resolve() == DEFAULT_OUT["gpu"].resolve()


def test_grafana_provisioning_points_at_the_dashboard_folder_and_datasource() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    grafana = compose["services"]["grafana"]
    targets = {v["target"]: DOCKER_DIR / v["source"] for v in grafana["volumes"]}
    provider = yaml.safe_load((targets["/etc/grafana/provisioning"] / "dashboards" / "triton.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (targets["/var/lib/grafana/dashboards"] / Path(home).name).is_file()

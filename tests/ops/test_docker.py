"""docker/: the Dockerfile lints clean, the compose file validates, and what it mounts exists."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.ops.conftest import DOCKER_DIR, run, system_tool, venv_tool
from tools.paths import REPO_ROOT
from tools.repo.artifacts import missing_artifacts
from tools.repo.model_config import load_config
from tools.repo.variant import DEFAULT_OUT, write_variant
from tools.serve.admin_key import AdminKeyError, restricted_api_flags, server_command
from tools.serve.local_triton import ServerOptions

COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
TEST_KEY = "compose-test-key"


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
    env = dict(os.environ, TRITON_MODEL_REPOSITORY=str(repository), TRITON_ADMIN_KEY=TEST_KEY)
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
    assert "/v2/models/embed/ready" in " ".join(triton["healthcheck"]["test"])
    assert {"prometheus", "grafana"} <= set(resolved_compose["services"])


def test_every_mounted_folder_exists_and_every_model_config_parses(resolved_compose: dict) -> None:
    for name, service in resolved_compose["services"].items():
        for volume in service.get("volumes", []):
            source = Path(volume["source"])
            assert source.exists(), f"{name} mounts {source}, which does not exist"
            if volume["target"] == "/models":
                configs = sorted(source.glob("*/config.pbtxt"))
                assert {path.parent.name for path in configs} == {"embed", "encoder", "llm", "tokenizer"}
                for config in configs:
                    load_config(config)  # raises with the file name on a parse error
                assert missing_artifacts(source) == []


def test_the_image_serves_the_llm_on_the_gpu_with_torchs_cuda_build(resolved_compose: dict) -> None:
    """The GPU path of the generative model: the image installs torch from PyPI (whose Linux
    wheel is the CUDA build; a CPU-only index or `+cpu` version would leave the GPU unused),
    puts the `llm` package on every interpreter's path, and the repository compose mounts
    runs the engine on CUDA."""
    pins = [line for line in (DOCKER_DIR / "requirements-container.txt").read_text().splitlines() if line and not line.startswith("#")]
    (torch,) = [line for line in pins if line.startswith("torch==")]
    assert "+cpu" not in torch and "--index-url" not in " ".join(pins) and "--extra-index-url" not in " ".join(pins)
    assert "llm /opt/triton-embed/llm" in dockerfile_instruction("COPY")
    assert any("triton-llm.pth" in command and "/opt/triton-embed" in command for command in dockerfile_instruction("RUN"))
    (models,) = [v for v in resolved_compose["services"]["triton"]["volumes"] if v["target"] == "/models"]
    llm = load_config(Path(models["source"]) / "llm")
    assert llm.parameters["device"].string_value == "cuda" and llm.parameters["dtype"].string_value == "bfloat16"


def test_compose_default_repository_is_the_generated_gpu_variant() -> None:
    """Without the variable the stack mounts what `tools.repo.variant --kind gpu` writes by default."""
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


def dockerfile_instruction(name: str) -> list[str]:
    lines = (DOCKER_DIR / "Dockerfile").read_text().splitlines()
    return [line.split(None, 1)[1] for line in lines if line.startswith(f"{name} ")]


def test_the_image_entrypoint_is_the_projects_admin_key_launcher() -> None:
    """One definition of the restricted-API flags: the image runs tools/serve/admin_key.py, which
    appends what the local runtime appends (restricted_api_flags), then execs tritonserver."""
    (entrypoint,) = dockerfile_instruction("ENTRYPOINT")
    assert json.loads(entrypoint) == ["python3", "/opt/triton-embed/admin_key.py", "exec", "tritonserver"]
    assert "tools/serve/admin_key.py /opt/triton-embed/admin_key.py" in dockerfile_instruction("COPY")


def test_the_build_context_sends_exactly_what_the_dockerfile_copies() -> None:
    """Compose builds from the repository root; .dockerignore there keeps weights, venv and build/ out."""
    build = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triton"]["build"]
    assert (DOCKER_DIR / build["context"]).resolve() == REPO_ROOT and build["dockerfile"] == "docker/Dockerfile"
    patterns = [line for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert patterns[0] == "*"
    allowed = {pattern[1:] for pattern in patterns[1:] if pattern.startswith("!")}
    sources = {copy.split()[0] for copy in dockerfile_instruction("COPY")}
    assert sources == allowed and all((REPO_ROOT / source).exists() for source in sources)
    assert "llm/**/__pycache__" in patterns, "the llm package goes in without bytecode caches"
    assert not any(fnmatch.fnmatch("model_repository/encoder/1/model.onnx", pattern) for pattern in allowed)


def test_compose_restricts_model_control_with_the_key_from_the_environment(resolved_compose: dict) -> None:
    triton = resolved_compose["services"]["triton"]
    assert "entrypoint" not in triton, "overriding the entrypoint would drop the restriction"
    assert "--model-control-mode=explicit" in triton["command"]
    assert triton["environment"]["TRITON_ADMIN_KEY"] == TEST_KEY, "passed through from the caller's environment"
    command = ["tritonserver", *triton["command"]]
    assert server_command(command, triton["environment"])[-2:] == restricted_api_flags(TEST_KEY)
    with pytest.raises(AdminKeyError, match="empty"):
        server_command(command, {})


def test_compose_file_holds_no_key_and_no_second_copy_of_the_flags() -> None:
    text = COMPOSE_FILE.read_text()
    assert "--http-restricted-api" not in text and "--grpc-restricted-protocol" not in text
    triton = yaml.safe_load(text)["services"]["triton"]
    assert triton["environment"] == ["TRITON_ADMIN_KEY"], "a name to pass through, never a value"


def test_compose_defaults_are_the_local_runtimes_and_summary_latencies_are_on() -> None:
    """The flags `make serve` honours for Docker default to what the local runtime uses."""
    command = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triton"]["command"]
    defaults = dict(re.findall(r"\$\{(TRITON_\w+):-([^}]*)\}", " ".join(command)))
    options = ServerOptions()
    assert defaults == {
        "TRITON_EXIT_TIMEOUT_S": str(options.exit_timeout_s),
        "TRITON_CACHE_BYTES": str(options.cache_size_bytes),
        "TRITON_LOG_VERBOSE": str(options.log_verbose),
    }
    grace = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triton"]["stop_grace_period"]
    assert grace == f"${{TRITON_STOP_GRACE_PERIOD:-{options.exit_timeout_s + 10}s}}"
    assert "--metrics-config=summary_latencies=true" in command

"""The vLLM GPU path, checked without a GPU or a Docker engine: NVIDIA's Triton vLLM image
(docker/Dockerfile.vllm) lints and pins one release everywhere, compose runs it on the generated
vllm-gpu repository, `tools.serve --runtime docker --gpu-variant vllm-gpu` picks that override,
vLLM takes the generated model.json, and the prepared GPU check (tools/gpu/vllm_check.sh)
parses its arguments and skips what this host cannot run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.ops.conftest import DOCKER_DIR, K8S_DIR, run, system_tool, venv_tool
from tools.paths import REPO_ROOT, VLLM_PYTHON
from tools.repo.model_config import load_config
from tools.repo.variant import CONTAINER_REPOSITORY, DEFAULT_OUT, write_variant
from tools.serve.docker_runtime import COMPOSE_FILE, GATEWAY_COMPOSE_FILE, VARIANT_COMPOSE_FILES, compose_file_args

DOCKERFILE = DOCKER_DIR / "Dockerfile.vllm"
VLLM_COMPOSE_FILE = DOCKER_DIR / "compose.vllm.yaml"
CHECK = REPO_ROOT / "tools" / "gpu" / "vllm_check.sh"
TEST_KEY = "compose-test-key"


def release() -> str:
    (version,) = re.findall(r"^ARG TRITON_VERSION=(\d{2}\.\d{2})$", DOCKERFILE.read_text(), re.M)
    return version


def test_the_vllm_dockerfile_passes_hadolint() -> None:
    result = run([venv_tool("hadolint"), str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_release_of_nvidias_vllm_image_everywhere() -> None:
    """The vLLM image and the full image the ONNX Runtime backend comes from are one release, the
    one compose tags, the Kubernetes overlay deploys and the README names."""
    version = release()
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", DOCKERFILE.read_text(), re.M)
    assert stages == [
        ("nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3", "full"),
        ("nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-vllm-python-py3", ""),
    ]
    triton = yaml.safe_load(VLLM_COMPOSE_FILE.read_text())["services"]["triton"]
    assert triton["build"]["args"]["TRITON_VERSION"] == f"${{TRITON_VLLM_VERSION:-{version}}}"
    assert triton["image"].endswith(f":${{TRITON_VLLM_VERSION:-{version}}}")
    overlay = yaml.safe_load((K8S_DIR / "overlays" / "vllm-gpu" / "kustomization.yaml").read_text())
    assert [image["newTag"] for image in overlay["images"]] == [version]
    assert f"{version}-vllm-python-py3" in (DOCKER_DIR / "README.md").read_text()


def test_the_vllm_image_copies_the_onnx_runtime_backend_and_only_admin_key_from_the_context() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    from_full = [line.split()[-2] for line in lines if line.startswith("COPY --from=full")]
    assert "/opt/tritonserver/backends/onnxruntime" in from_full, "the vLLM image carries no ONNX Runtime backend"
    local = [line.split()[1] for line in lines if line.startswith("COPY ") and "--from=" not in line]
    patterns = [
        line for line in (DOCKER_DIR / "Dockerfile.vllm.dockerignore").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert patterns[0] == "*" and {pattern[1:] for pattern in patterns[1:]} == set(local) == {"tools/serve/admin_key.py"}


def test_the_vllm_image_keeps_the_projects_entrypoint_and_user() -> None:
    def instructions(path: Path, name: str) -> list[str]:
        return [line.split(None, 1)[1] for line in path.read_text().splitlines() if line.startswith(f"{name} ")]

    for name in ("ENTRYPOINT", "CMD", "USER", "EXPOSE"):
        assert instructions(DOCKERFILE, name) == instructions(DOCKER_DIR / "Dockerfile", name), name


@pytest.fixture(scope="module")
def vllm_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("compose") / "vllm_gpu_repository"
    write_variant("vllm-gpu", repository)
    return repository


def compose_config(repository: Path, *files: Path) -> dict:
    tool = system_tool("docker-compose", "docker-compose")
    env = dict(os.environ, TRITON_MODEL_REPOSITORY=str(repository), TRITON_ADMIN_KEY=TEST_KEY)
    arguments = [part for path in files for part in ("-f", str(path))]
    quiet = run([tool, *arguments, "config", "-q"], env=env)
    assert quiet.returncode == 0, quiet.stderr
    result = run([tool, *arguments, "config"], env=env)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_runs_the_vllm_image_on_the_vllm_gpu_repository_with_the_same_server_flags(vllm_repository: Path) -> None:
    stack = compose_config(vllm_repository, COMPOSE_FILE, VLLM_COMPOSE_FILE)
    triton, plain = stack["services"]["triton"], compose_config(vllm_repository, COMPOSE_FILE)["services"]["triton"]
    assert triton["build"]["dockerfile"] == "docker/Dockerfile.vllm" and triton["image"] == f"triton-embed-vllm:{release()}"
    (models,) = [volume for volume in triton["volumes"] if volume["target"] == CONTAINER_REPOSITORY]
    assert models["read_only"] is True and Path(models["source"]) == vllm_repository
    assert triton["command"] == plain["command"], "the same Triton flags (model control, cache, summary latencies)"
    assert triton["deploy"] == plain["deploy"] and triton["healthcheck"]["test"] == plain["healthcheck"]["test"]
    assert {"prometheus", "grafana"} <= set(stack["services"])


def test_the_mounted_repository_serves_llm_on_the_vllm_backend_from_the_mounted_checkpoint(vllm_repository: Path) -> None:
    configs = sorted(vllm_repository.glob("*/config.pbtxt"))
    assert {path.parent.name for path in configs} == {"embed", "encoder", "llm", "tokenizer"}
    assert load_config(vllm_repository / "llm").backend == "vllm"
    engine = json.loads((vllm_repository / "llm" / "1" / "model.json").read_text())
    inside = Path(engine["model"]).relative_to(CONTAINER_REPOSITORY)
    assert (vllm_repository / inside / "model.safetensors").is_file(), "model.json names the checkpoint where compose mounts it"
    assert (vllm_repository / "llm" / "1" / "tokenizer.json").is_file(), "the gateway's --llm-folder=/models/llm/1"


def test_with_the_gateway_both_containers_mount_the_vllm_repository(vllm_repository: Path) -> None:
    stack = compose_config(vllm_repository, COMPOSE_FILE, GATEWAY_COMPOSE_FILE, VLLM_COMPOSE_FILE)
    sources = {
        name: [v["source"] for v in stack["services"][name]["volumes"] if v["target"] == "/models"] for name in ("triton", "gateway")
    }
    assert sources["triton"] == sources["gateway"] == [str(vllm_repository)]


def test_the_vllm_override_defaults_to_the_generated_vllm_gpu_repository() -> None:
    triton = yaml.safe_load(VLLM_COMPOSE_FILE.read_text())["services"]["triton"]
    (source,) = [v["source"] for v in triton["volumes"] if v["target"] == CONTAINER_REPOSITORY]
    default = re.fullmatch(r"\$\{TRITON_MODEL_REPOSITORY:-(.+)\}", source).group(1)
    assert (DOCKER_DIR / default).resolve() == DEFAULT_OUT["vllm-gpu"].resolve()


def test_the_docker_runtime_adds_the_vllm_override_last_for_that_variant() -> None:
    assert VARIANT_COMPOSE_FILES["vllm-gpu"] == VLLM_COMPOSE_FILE
    files = compose_file_args(gateway=True, kind="vllm-gpu")[1::2]
    assert files == [str(COMPOSE_FILE), str(GATEWAY_COMPOSE_FILE), str(VLLM_COMPOSE_FILE)]
    assert compose_file_args(gateway=False, kind="gpu")[1::2] == [str(COMPOSE_FILE)]
    from tools.serve.__main__ import build_parser

    assert build_parser().parse_args(["--runtime", "docker", "--gpu-variant", "vllm-gpu"]).gpu_variant == "vllm-gpu"


@pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason="no .venv-vllm (make vllm-venv): vLLM's own AsyncEngineArgs are not at hand")
def test_vllm_accepts_every_key_of_the_generated_model_json(vllm_repository: Path) -> None:
    """NVIDIA's backend builds AsyncEngineArgs(**model.json); vLLM of .venv-vllm takes every key
    (the container's vLLM is another release: the GPU check runs it for real). The model path is the
    container's /models/...; with HF_HUB_OFFLINE set vLLM resolves it at once, so it points at a folder here."""
    code = (
        "import json, sys; from vllm.engine.arg_utils import AsyncEngineArgs; "
        "args = json.load(open(sys.argv[1])); assert args['model'].startswith('/models/'), args['model']; "
        "AsyncEngineArgs(**{**args, 'model': sys.argv[2]})"
    )
    model_json = vllm_repository / "llm" / "1" / "model.json"
    result = run([str(VLLM_PYTHON), "-c", code, str(model_json), str(vllm_repository)], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]


# The GPU check script.


def check(*arguments: str, env: dict | None = None) -> object:
    return run(["bash", str(CHECK), *arguments], env=env, cwd=REPO_ROOT)


def test_the_gpu_check_is_valid_bash_and_passes_shellcheck() -> None:
    assert os.access(CHECK, os.X_OK), "run as one command: tools/gpu/vllm_check.sh"
    syntax = run(["bash", "-n", str(CHECK)])
    assert syntax.returncode == 0, syntax.stderr
    result = run([system_tool("shellcheck", "shellcheck"), str(CHECK)])
    assert result.returncode == 0, result.stdout


def test_the_gpu_check_plans_the_three_levels_inside_a_device_command() -> None:
    result = check("--dry-run")
    assert result.returncode == 0, result.stderr
    assert "--concurrency 16,64,256" in result.stdout and "--targets vllm-server" in result.stdout
    budget = int(re.search(r"plan: budget (\d+) s", result.stdout).group(1))
    assert budget <= 480, "a device command runs at most 600 s, and a second try must still fit 15 minutes"
    for step in ("env", "checkpoint", "parity", "bench", "calibrate"):
        assert re.search(rf"^  {step}: at most \d+ s", result.stdout, re.M), step


def test_the_gpu_check_takes_a_subset_of_steps_and_a_budget() -> None:
    result = check("--dry-run", "--steps", "env,bench", "--budget", "300", "--concurrency", "8,32", "--out", "/tmp/x")
    assert result.returncode == 0, result.stderr
    assert "plan: budget 300 s, results in /tmp/x" in result.stdout
    assert "parity: not selected" in result.stdout and re.search(r"bench: at most \d+ s", result.stdout)
    assert "--concurrency 8,32" in result.stdout


@pytest.mark.parametrize(
    "arguments",
    [("--steps", "env,warp"), ("--budget", "ten"), ("--budget", "10"), ("--concurrency", "16;64"), ("--frobnicate",), ("--out",)],
    ids=["unknown-step", "budget-not-a-number", "budget-too-small", "bad-concurrency", "unknown-option", "missing-value"],
)
def test_the_gpu_check_refuses_bad_arguments_with_status_2(arguments: tuple[str, ...]) -> None:
    result = check(*arguments, "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("vllm_check.sh: ") and "--help" in result.stderr


def test_the_gpu_checks_bench_command_is_one_the_llm_benchmark_accepts() -> None:
    """The plan's bench arguments parse with bench-llm's own parser (its --vllm-python/--vllm-config)."""
    from tools.bench.llm.__main__ import build_parser

    line = next(line for line in check("--dry-run").stdout.splitlines() if "python -m tools.bench.llm" in line)
    arguments = shlex.split(line.split("python -m tools.bench.llm", 1)[1])
    args = build_parser().parse_args([*arguments, "--vllm-python", shutil.which("python3") or "python3"])
    assert args.targets == "vllm-server" and args.concurrency == (16, 64, 256) and args.rates == ()
    assert args.vllm_config.name == "vllm-gpu.pbtxt"


def test_without_cuda_or_vllm_every_vllm_step_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """This host has neither: the check still runs, says why each step did not, and exits 0."""
    env = {key: value for key, value in os.environ.items() if key != "OUT"}
    result = check("--out", str(tmp_path), "--budget", "120", "--python", sys.executable, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert re.search(r"^env\s+ok", summary, re.M)
    for step in ("parity", "bench", "calibrate"):
        assert re.search(rf"^{step}\s+skipped\s+0s\s+needs .*(a CUDA GPU|vllm)", summary, re.M), summary
    assert json.loads((tmp_path / "env.json").read_text())["packages"]["vllm"] is None
    assert (tmp_path / "check.log").read_text().count("skipped") >= 3
    assert len(list(tmp_path.rglob("*"))) <= 8, "a device call brings back at most 8 files"

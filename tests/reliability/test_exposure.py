"""The model-control API is restricted whenever it is enabled; the tools pass the key."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config
from tools.serve.admin_key import (
    AdminKeyError,
    model_control_requested,
    read_key_file,
    restricted_api_flags,
    server_command,
    write_key_file,
)
from tools.serve.local_triton import ServerOptions, TritonInstallation, TritonStartError, build_command
from tools.serve.server_session import triton_endpoints
from tools.triton_client import TritonClient, TritonError


def test_a_generated_key_file_is_readable_by_its_owner_only(tmp_path) -> None:
    path = write_key_file(tmp_path / "key", "s3cret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_key_file(path) == "s3cret"
    os.chmod(path, 0o644)
    with pytest.raises(AdminKeyError, match="readable by others"):
        read_key_file(path)


def test_model_control_without_a_key_is_never_started() -> None:
    options = ServerOptions(model_control_mode="explicit")
    with pytest.raises(TritonStartError, match="admin key"):
        build_command(options, TritonInstallation.find(), backends=options.work_dir)
    command = build_command(options, TritonInstallation.find(), options.work_dir, admin_key="k")
    assert set(restricted_api_flags("k")) <= set(command)
    assert "--http-restricted-api=model-repository,trace,logging:triton-admin-key=k" in command


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model-control-mode=explicit"], True),
        (["--model-control-mode", "poll"], True),
        (["--model-control-mode=none"], False),
        (["--model-repository=/models"], False),
    ],
)
def test_model_control_is_recognised_in_both_flag_spellings(args: list[str], expected: bool) -> None:
    assert model_control_requested(args) is expected


def test_the_container_command_gets_the_same_flags_as_the_local_runtime() -> None:
    command = ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit"]
    assert server_command(command, {"TRITON_ADMIN_KEY": "k\n"}) == [*command, *restricted_api_flags("k")]
    with pytest.raises(AdminKeyError, match="TRITON_ADMIN_KEY is empty"):
        server_command(command, {"TRITON_ADMIN_KEY": " "})
    assert server_command(command[:2], {}) == command[:2], "no model control: nothing to restrict"


FAKE_TRITONSERVER = """#!/bin/sh
# Stands in for tritonserver: prints the arguments it got and whether the key leaked into its environment.
for arg in "$@"; do echo "ARG $arg"; done
echo "KEY_IN_ENV ${TRITON_ADMIN_KEY:-no}"
"""


def run_entrypoint(tmp_path: Path, env_key: str | None, *server_args: str) -> subprocess.CompletedProcess:
    """tools/serve/admin_key.py as the image runs it: a lone script (`python3 admin_key.py exec ...`);
    -I keeps the repository (and the script's folder) off sys.path, as in the image."""
    fake = tmp_path / "tritonserver"
    fake.write_text(FAKE_TRITONSERVER)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_ADMIN_KEY"}
    env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
    if env_key is not None:
        env["TRITON_ADMIN_KEY"] = env_key
    script = REPO_ROOT / "tools" / "serve" / "admin_key.py"
    command = [sys.executable, "-I", str(script), "exec", "tritonserver", *server_args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_the_image_entrypoint_restricts_model_control_with_the_key_from_the_environment(tmp_path) -> None:
    result = run_entrypoint(tmp_path, "s3cret", "--model-repository=/models", "--model-control-mode=explicit")
    assert result.returncode == 0, result.stderr
    args = [line.removeprefix("ARG ") for line in result.stdout.splitlines() if line.startswith("ARG ")]
    assert args == ["--model-repository=/models", "--model-control-mode=explicit", *restricted_api_flags("s3cret")]
    assert "KEY_IN_ENV no" in result.stdout, "the key must not reach Triton's (and its stubs') environment"
    assert "s3cret" not in result.stderr, "the entrypoint must not log the key"


def test_the_image_entrypoint_refuses_model_control_without_a_key(tmp_path) -> None:
    result = run_entrypoint(tmp_path, None, "--model-repository=/models", "--model-control-mode=explicit")
    assert result.returncode == 2
    assert "TRITON_ADMIN_KEY is empty" in result.stderr and "ARG" not in result.stdout


def test_the_image_entrypoint_passes_a_server_without_model_control_through(tmp_path) -> None:
    result = run_entrypoint(tmp_path, None, "--model-repository=/models")
    assert result.returncode == 0 and result.stdout.splitlines()[0] == "ARG --model-repository=/models"
    assert "restricted" not in result.stdout


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unauthenticated_load_and_unload_are_refused(explicit_triton, protocol: str) -> None:
    options = explicit_triton.options
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(options.http_url if protocol == "http" else options.grpc_url)
    try:
        for call in (lambda: client.unload_model("embed"), lambda: client.load_model("embed"), client.get_model_repository_index):
            with pytest.raises(InferenceServerException, match="restricted"):
                call()
        wrong = {"triton-admin-key": "guess"} if protocol == "http" else {"triton-grpc-protocol-triton-admin-key": "guess"}
        with pytest.raises(InferenceServerException, match="restricted"):
            client.unload_model("embed", headers=wrong)
        assert client.is_model_ready("embed"), "inference and health stay open"
    finally:
        client.close()


@pytest.mark.integration
def test_the_key_file_and_headers_let_the_tuner_reload(explicit_triton) -> None:
    options = explicit_triton.options
    key = read_key_file(explicit_triton.admin_key_file)
    config = load_config(MODEL_REPOSITORY / "encoder")
    with triton_endpoints(options.http_url, options.grpc_url, explicit_control=True, admin_key=key) as endpoints:
        endpoints.client.load("encoder", config)
    with pytest.raises(TritonError, match="restricted"):
        TritonClient(options.http_url).load("encoder", config)

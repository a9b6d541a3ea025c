"""The model-control API is restricted whenever it is enabled; the tools pass the key."""

from __future__ import annotations

import os
import stat

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tools.admin_key import AdminKeyError, read_key_file, restricted_api_flags, write_key_file
from tools.local_triton import ServerOptions, TritonInstallation, TritonStartError, build_command
from tools.model_config import load_config
from tools.paths import MODEL_REPOSITORY
from tools.server_session import triton_endpoints
from tools.tuning.reload import ReloadError, load_with_config


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
        load_with_config(endpoints.http_url, "encoder", config, endpoints.headers)
    with pytest.raises(ReloadError, match="restricted"):
        load_with_config(options.http_url, "encoder", config)

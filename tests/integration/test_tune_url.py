"""`tools.tune --url` tunes the config the target server runs and leaves the server running it.

The server here is started from a generated copy of the repository whose encoder config
differs from the committed one, as a GPU/TensorRT server's does: other batching, one
instance, no warm-up and a parameter of its own. Loading the committed config into it
(what the tuner used to do) would be visible in every assertion below.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient

from tests.conftest import start_triton
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import ModelConfig, load_config
from tools.repo.policy_repository import copy_repository
from tools.serve.local_triton import LocalTriton
from tools.triton_client import TritonClient

pytestmark = pytest.mark.integration

MARKER = "variant"  # a parameter only the served config has


def as_variant(config: ModelConfig) -> None:
    batcher = config.dynamic_batching
    batcher.max_queue_delay_microseconds = 7000
    del batcher.preferred_batch_size[:]
    batcher.preferred_batch_size.append(4)
    for group in config.instance_group:
        group.count = 1
    del config.model_warmup[:]
    config.parameters[MARKER].string_value = "served, not committed"


@pytest.fixture(scope="module")
def variant_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    directory = tmp_path_factory.mktemp("variant")
    repository = copy_repository(directory / "repository", {"encoder": as_variant})
    server = start_triton(directory / "triton.log", model_repository=repository, model_control_mode="explicit", load_models=("*",))
    try:
        yield server
    finally:
        server.stop()


def server_config_document(server: LocalTriton) -> dict:
    """The encoder's config exactly as the server reports it (JSON)."""
    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        return client.get_model_config("encoder")
    finally:
        client.close()


def tune_command(server: LocalTriton, report_dir, delays: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tools.tune",
        "--model",
        "encoder",
        "--p99-ms",
        "5000",
        "--seq-len",
        "32",
        "--url",
        server.options.http_url,
        "--grpc-url",
        server.options.grpc_url,
        "--admin-key-file",
        str(server.admin_key_file),
        "--strategy",
        "grid",
        "--max-batch-sizes",
        "32",
        "--delays-us",
        delays,
        "--preferred",
        "8",
        "--instances",
        "1",
        "--priority-queues",
        "keep",
        "--confirm",
        "1",
        "--concurrency",
        "2",
        "--warmup",
        "0.3",
        "--window",
        "1",
        "--max-windows",
        "2",
        "--no-plots",
        "--report-dir",
        str(report_dir),
    ]


def test_the_sweep_starts_from_the_servers_config_and_leaves_the_server_running_it(variant_triton, tmp_path) -> None:
    before = server_config_document(variant_triton)
    assert load_config(MODEL_REPOSITORY / "encoder").dynamic_batching.max_queue_delay_microseconds != 7000, "the variant differs"

    result = subprocess.run(tune_command(variant_triton, tmp_path, "0"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]

    assert server_config_document(variant_triton) == before, "the server runs exactly its earlier config again"
    served = TritonClient(variant_triton.options.http_url).config("encoder")
    assert load_config(tmp_path / "server-config.pbtxt") == served, "the base was read from the server"
    trials = json.loads((tmp_path / "trials.json").read_text())
    assert not any(trial["error"] for trial in trials), "every candidate loaded into the server"
    assert trials[0]["candidate"] == {"max_batch_size": 32, "preferred": [4], "delay_us": 7000, "instances": 1, "priority_queues": True}
    winner = load_config(tmp_path / "config.pbtxt")
    assert winner.parameters[MARKER].string_value == "served, not committed", "the winner is the server's config, rebatched"
    assert not winner.model_warmup and winner.instance_group[0].count == 1
    assert winner.dynamic_batching.priority_queue_policy == served.dynamic_batching.priority_queue_policy


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_still_restores_the_servers_config(variant_triton, tmp_path, signum, status) -> None:
    before = server_config_document(variant_triton)
    process = subprocess.Popen(
        tune_command(variant_triton, tmp_path, "0,1000,3000,6000"), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while server_config_document(variant_triton) == before:  # until a candidate is loaded
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no candidate was loaded in time"
            time.sleep(0.2)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == status, stderr[-3000:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert server_config_document(variant_triton) == before

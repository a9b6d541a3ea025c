"""Every scenario preset loads on the real local Triton, runs the configs it promises (as the
server reports them) and serves the same embeddings as sentence-transformers."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tests.integration.test_cli import LineCollector
from tests.integration.test_embed import MIN_COSINE, SENTENCES, cosine
from tools.embed import EmbeddingClient
from tools.paths import REPO_ROOT
from tools.ports import free_ports
from tools.repo.instances import instance_count
from tools.repo.model_config import ModelConfig, has_priority_queues
from tools.repo.presets import DEFAULT_PRESET, PRESETS, preset_configs, write_preset
from tools.repo.variant import INTRA_OP_THREADS
from tools.serve.local_triton import ServerOptions
from tools.triton_client import TritonClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=list(PRESETS))
def preset_server(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerOptions]]:
    """A real Triton serving the preset's repository as `make serve` picks it: the default
    preset is the committed repository, which the session's server already serves; any
    other is its variant repository, written the way `make serve` does."""
    if request.param == DEFAULT_PRESET:  # repository_for(DEFAULT_PRESET) is MODEL_REPOSITORY
        yield request.param, request.getfixturevalue("triton")
        return
    folder = tmp_path_factory.mktemp(f"preset-{request.param}")
    repository = write_preset(request.param, out=folder / "repository")
    server = start_triton(folder / "triton.log", model_repository=repository)
    try:
        yield request.param, server.options
    finally:
        server.stop()


def batching_fields(config: ModelConfig) -> dict:
    """What a preset sets, in a form two configs can be compared by (Triton completes the
    rest of a loaded config with its own defaults: a Python-backend model without preferred
    sizes reports max_batch_size as its one preferred size, which batches the same way)."""
    batcher = config.dynamic_batching
    threads = config.parameters[INTRA_OP_THREADS].string_value if INTRA_OP_THREADS in config.parameters else None
    return {
        "delay_us": batcher.max_queue_delay_microseconds,
        "preferred": list(batcher.preferred_batch_size) or [config.max_batch_size],
        "priority_levels": batcher.priority_levels,
        "default_priority_level": batcher.default_priority_level,
        "queue_sizes": {level: policy.max_queue_size for level, policy in batcher.priority_queue_policy.items()},
        "default_queue_size": batcher.default_queue_policy.max_queue_size,
        "instances": instance_count(config),
        "threads": threads,
    }


@pytest.mark.parametrize("model", ["encoder", "tokenizer"])
def test_the_server_runs_the_preset_batching_fields(preset_server, model: str) -> None:
    name, options = preset_server
    loaded = TritonClient(options.http_url).config(model)  # GET /v2/models/<model>/config
    assert batching_fields(loaded) == batching_fields(preset_configs(PRESETS[name])[model])


def test_the_preset_serves_embeddings_equal_to_sentence_transformers(preset_server, reference_model) -> None:
    name, options = preset_server
    expected = reference_model.encode(SENTENCES, convert_to_numpy=True)
    priorities = [1, 2] if has_priority_queues(preset_configs(PRESETS[name])["encoder"]) else [0]
    with EmbeddingClient("grpc", options.grpc_url) as client:
        for priority in priorities:
            served = client.embed(SENTENCES, priority=priority)
            assert served.shape == (len(SENTENCES), 384)
            assert cosine(served, expected).min() >= MIN_COSINE, f"{name}, priority {priority}"


def test_serve_preset_serves_the_variant_and_stops_on_sigterm() -> None:
    """`make serve PRESET=bulk`: Triton runs the bulk configs (no priority levels)."""
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    command = [sys.executable, "-m", "tools.serve", "--runtime", "local", "--preset", "bulk", *ports, "--exit-timeout", "5", "--no-gateway"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = LineCollector(process.stderr)
    try:
        log.wait_for("Triton is ready", process)
        encoder = TritonClient(f"127.0.0.1:{http}").config("encoder")
        assert batching_fields(encoder) == batching_fields(preset_configs(PRESETS["bulk"])["encoder"])
        assert not has_priority_queues(encoder)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert "preset bulk: serving" in log.text()


def test_serve_refuses_an_unknown_preset_before_starting_anything() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.serve", "--runtime", "local", "--preset", "fastest"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "invalid choice: 'fastest'" in result.stderr and "starting" not in result.stderr

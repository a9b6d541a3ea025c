"""Faults: a backend stub killed mid-run, a reload under load, SIGTERM with requests in
flight, and corrupt or missing artifacts."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from tritonclient.utils import InferenceServerException

from tests.conftest import start_triton
from tools.embed import EmbeddingClient
from tools.health_watch import HealthWatch, stub_processes
from tools.local_triton import TritonStartError, free_ports
from tools.model_config import load_config
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.policy_repository import copy_repository
from tools.tuning.reload import load_with_config

pytestmark = pytest.mark.integration


def embed_once(url: str, text: str) -> str:
    client = EmbeddingClient("grpc", url)
    try:
        client.embed([f"{text} {time.time_ns()}"])
        return "ok"
    except InferenceServerException as exc:
        return str(exc)
    finally:
        client.close()


def kill_stubs(server_pid: int, model: str) -> list[int]:
    """SIGKILL every backend stub of `model` (one per instance)."""
    stubs = [s for s in stub_processes(server_pid) if s.model == model and s.alive]
    assert stubs, f"no stub process of {model}"
    for stub in stubs:
        os.kill(stub.pid, signal.SIGKILL)
    return [stub.pid for stub in stubs]


@pytest.mark.parametrize("model", ["tokenizer", "encoder"])
def test_a_killed_stub_fails_requests_cleanly_until_the_health_watch_reloads_it(explicit_triton, model: str) -> None:
    options = explicit_triton.options
    watch = HealthWatch(explicit_triton.pid, options.http_url, options.model_repository, explicit_triton.admin_headers, 0.5)
    assert embed_once(options.grpc_url, "before") == "ok"
    kill_stubs(explicit_triton.pid, model)
    time.sleep(0.3)
    failure = embed_once(options.grpc_url, "while dead")
    assert re.search(rf"Stub process '{model}_0_\d+' is not healthy", failure), f"Triton neither hangs nor restarts the stub: {failure}"
    with urllib.request.urlopen(f"http://{options.http_url}/v2/models/{model}/ready") as response:
        assert response.status == 200, "readiness does not notice: hence the watch"
    deadline = time.monotonic() + 60
    while not watch.recoveries and time.monotonic() < deadline:
        watch.check_once()
        time.sleep(0.5)
    assert [m for m, _ in watch.recoveries] == [model]
    assert embed_once(options.grpc_url, "after") == "ok"


def test_reloads_under_load_let_every_request_complete_or_fail_cleanly(explicit_triton) -> None:
    options = explicit_triton.options
    config = load_config(MODEL_REPOSITORY / "encoder")
    stop = time.monotonic() + 8
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [
            pool.submit(lambda: [embed_once(options.grpc_url, "load") for _ in range(400) if time.monotonic() < stop]) for _ in range(5)
        ]
        for delay in (4000, 1000, 5000):
            config.dynamic_batching.max_queue_delay_microseconds = delay
            load_with_config(options.http_url, "encoder", config, explicit_triton.admin_headers)
        answers = [answer for future in futures for answer in future.result(timeout=120)]
    assert answers and answers.count("ok") >= len(answers) - 5, [a for a in answers if a != "ok"][:5]


def test_serve_drains_in_flight_requests_on_sigterm() -> None:
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", "--runtime", "local", "--http-port", str(http), "--grpc-port", str(grpc),
         "--metrics-port", str(metrics), "--exit-timeout", "20", "--no-gateway"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and embed_once(f"127.0.0.1:{grpc}", "up?") != "ok":
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.5)
        client = EmbeddingClient("grpc", f"127.0.0.1:{grpc}")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            in_flight = [pool.submit(client.embed, [f"long {i} " + "word " * 300] * 32) for i in range(4)]
            time.sleep(0.3)
            process.send_signal(signal.SIGTERM)
            shapes = [future.result(timeout=60).shape for future in in_flight]
        assert shapes == [(32, 384)] * 4, "requests accepted before SIGTERM finish"
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(
    ("model", "damage", "message"),
    [
        (
            "encoder",
            lambda v: v.joinpath("model.onnx").write_bytes(v.joinpath("model.onnx").read_bytes()[:4096]),
            r"cannot load .*encoder/1/model\.onnx",
        ),
        ("tokenizer", lambda v: v.joinpath("tokenizer.json").unlink(), r"missing tokenizer/1/tokenizer\.json.*make export"),
        ("tokenizer", lambda v: v.joinpath("tokenizer.json").write_text("{ not json"), r"cannot load tokenizer file .*tokenizer\.json"),
    ],
    ids=["truncated-model-onnx", "missing-tokenizer-json", "corrupt-tokenizer-json"],
)
def test_a_damaged_artifact_fails_the_load_naming_the_file(tmp_path, model: str, damage, message: str) -> None:
    repository = copy_repository(tmp_path / "repository", {})
    version = repository / model / "1"
    for link in list(version.iterdir()):  # damage a real copy, never the exported artifact behind the link
        target = link.resolve()
        link.unlink()
        shutil.copy2(target, link)
    damage(version)
    with pytest.raises(TritonStartError) as error:
        start_triton(tmp_path / "triton.log", model_repository=repository, extra_args=("--exit-on-error=true",))
    log = (tmp_path / "triton.log").read_text() if (tmp_path / "triton.log").exists() else ""
    assert re.search(message, f"{error.value}\n{log}"), error.value

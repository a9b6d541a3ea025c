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
import threading
import time

import pytest
from tritonclient.utils import InferenceServerException

from tests.conftest import start_triton
from tools.embed import EmbeddingClient
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.ports import free_ports
from tools.repo.model_config import load_config
from tools.repo.policy_repository import copy_repository
from tools.serve.health_watch import HealthWatch, stub_processes
from tools.serve.local_triton import TritonStartError
from tools.triton_client import TritonClient
from tools.triton_client.stats import ModelStats

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
    """SIGKILL every backend stub of `model` (one per instance); returns once none of them runs."""
    stubs = [s for s in stub_processes(server_pid) if s.model == model and s.alive]
    assert stubs, f"no stub process of {model}"
    for stub in stubs:
        os.kill(stub.pid, signal.SIGKILL)
    killed = {stub.pid for stub in stubs}
    while any(s.alive for s in stub_processes(server_pid) if s.pid in killed):  # a zombie or reaped: dead
        time.sleep(0.01)
    return sorted(killed)


@pytest.mark.parametrize("model", ["tokenizer", "encoder"])
def test_a_killed_stub_fails_requests_cleanly_until_the_health_watch_reloads_it(explicit_triton, model: str) -> None:
    options = explicit_triton.options
    watch = HealthWatch(explicit_triton.pid, explicit_triton.client, options.model_repository, 0.5)
    assert embed_once(options.grpc_url, "before") == "ok"
    kill_stubs(explicit_triton.pid, model)
    failure = embed_once(options.grpc_url, "while dead")
    assert re.search(rf"Stub process '{model}_0_\d+' is not healthy", failure), f"Triton neither hangs nor restarts the stub: {failure}"
    assert explicit_triton.client.model_ready(model), "readiness does not notice: hence the watch"
    while not watch.recoveries:  # a reload takes what loading takes here; the suite's timeout bounds a hang
        watch.check_once()
        time.sleep(0.5)
    assert [m for m, _ in watch.recoveries] == [model]
    assert embed_once(options.grpc_url, "after") == "ok"


def test_reloads_under_load_let_every_request_complete_or_fail_cleanly(explicit_triton) -> None:
    """The load runs exactly as long as the reloads take (however fast the machine), and
    answers arrive while each reload goes on: the reloads really happen under load."""
    options = explicit_triton.options
    config = load_config(MODEL_REPOSITORY / "encoder")
    done = threading.Event()
    answers: list[str] = []

    def keep_sending() -> None:
        while not done.is_set():
            answers.append(embed_once(options.grpc_url, "load"))

    answered_during = []
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        senders = [pool.submit(keep_sending) for _ in range(5)]
        try:
            for delay in (4000, 1000, 5000):
                before = len(answers)
                config.dynamic_batching.max_queue_delay_microseconds = delay
                explicit_triton.client.load("encoder", config)
                answered_during.append(answers[before:])
        finally:
            done.set()
        for sender in senders:
            sender.result()
    ok_during = [during.count("ok") for during in answered_during]
    assert all(ok_during), f"ok answers during each reload: {ok_during}"
    assert answers.count("ok") >= len(answers) - 5, [a for a in answers if a != "ok"][:5]


def test_serve_drains_in_flight_requests_on_sigterm() -> None:
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.serve",
            "--runtime",
            "local",
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
            "--exit-timeout",
            "120",
            "--no-gateway",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        http_url = f"127.0.0.1:{http}"
        ready = TritonClient(http_url).wait_until_ready(180, model="embed", process=process)
        assert ready, f"tools.serve never served embed on {http_url}: {'' if process.poll() is None else process.stderr.read()[-3000:]}"
        assert embed_once(f"127.0.0.1:{grpc}", "up?") == "ok"
        before = {model: ModelStats.settled(http_url, model) for model in ("tokenizer", "encoder")}
        client = EmbeddingClient("grpc", f"127.0.0.1:{grpc}")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            in_flight = [pool.submit(client.embed, [f"long {i} {j} " + "word " * 300 for j in range(16)]) for i in range(4)]
            # accepted: all four are past the tokenizer, at the encoder (its instances take up to three at a time)
            while (ModelStats.fetch(http_url, "tokenizer") - before["tokenizer"]).requests < 4:
                assert process.poll() is None, process.stderr.read()
                time.sleep(0.01)
            finished = (ModelStats.fetch(http_url, "encoder") - before["encoder"]).requests
            process.send_signal(signal.SIGTERM)
            shapes = [future.result().shape for future in in_flight]
        assert finished < 4, "the precondition: requests were still in flight at SIGTERM"
        assert shapes == [(16, 384)] * 4, "requests accepted before SIGTERM finish"
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

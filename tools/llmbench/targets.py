"""What a benchmark run measures: the `llm` model in one scheduler mode, or llama-server.

Our three modes are one model reloaded through Triton's model-control API with a config
override of `parameters.mode` (the tuner's mechanism: no restart, the repository on disk
untouched), starting from the config the server runs. The old instance is unloaded before
the new one loads, so two engines (weights plus a preallocated KV cache each) never share
the machine's memory. llama-server is started per run on a free port with the same GGUF
weights and stopped afterwards; its `--parallel` slots are its continuous batch.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.contract import LLM_MODEL
from tools.load.llm.clients import OpenAIStreamClient, StreamClient, TritonStreamClient
from tools.paths import BUILD_DIR
from tools.serve.process_group import stop_process_group
from tools.triton_client import TritonClient, TritonError
from tools.triton_client.readiness import wait_for_http_ok

log = logging.getLogger(__name__)

MODES = ("iteration", "request", "none")
LLAMA_SERVER = "llama-server"
MODEL = LLM_MODEL


def mode_target_name(mode: str) -> str:
    return f"llm {mode}"


def apply_mode(client: TritonClient, mode: str, model: str = MODEL) -> None:
    """Make `model` run `parameters.mode = mode` (a reload, unless it runs that mode already)."""
    config = client.config(model)
    if config.parameters["mode"].string_value == mode and client.model_ready(model):
        return
    config.parameters["mode"].string_value = mode
    started = time.monotonic()
    client.reload(model, config)
    log.info("%s reloaded with mode=%s in %.1f s", model, mode, time.monotonic() - started)


@dataclass
class ModeTarget:
    """The `llm` model on a Triton server, in one scheduler mode."""

    mode: str
    control: TritonClient
    grpc_url: str
    model: str = MODEL

    @property
    def name(self) -> str:
        return mode_target_name(self.mode)

    def describe(self) -> str:
        return f"Triton `{self.model}` model, parameters.mode={self.mode} (the rest as the server's config)"

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        apply_mode(self.control, self.mode, self.model)
        yield TritonStreamClient(self.grpc_url, self.model)


@dataclass
class LlamaServerTarget:
    """llama.cpp's llama-server on the GGUF: `parallel` slots, `context` tokens of KV cache
    shared by them (unified), `threads` CPU threads."""

    binary: Path
    gguf: Path
    parallel: int = 16
    context: int = 32768
    threads: int = 2
    extra_args: tuple[str, ...] = ()
    name: str = LLAMA_SERVER
    log_dir: Path = BUILD_DIR
    ready_timeout_s: float = 120.0
    command_used: list[str] = field(default_factory=list)

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            *("-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(port)),
            *("--parallel", str(self.parallel), "--ctx-size", str(self.context), "--threads", str(self.threads)),
            "--kv-unified",  # one KV pool shared by the slots, as our paged cache is
            *("--cache-ram", "0"),  # no prompt cache across requests: our engine has none either
            "--no-webui",
            *self.extra_args,
        ]

    def describe(self) -> str:
        shown = " ".join(self.command_used[1:]) if self.command_used else ""
        return f"llama.cpp llama-server, same GGUF (Q4_1 weights): {shown}".rstrip(": ")

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        from tools.ports import free_ports

        if not self.binary.is_file():
            raise FileNotFoundError(f"no llama-server at {self.binary}; build it with `make llama-server`")
        (port,) = free_ports(1)
        self.command_used = self.command(port)
        log_path = self.log_dir / f"llama-server-{port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting %s (log: %s)", " ".join(self.command_used), log_path)
        with open(log_path, "wb") as output:
            process = subprocess.Popen(self.command_used, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if not wait_for_http_ok(f"http://127.0.0.1:{port}/health", self.ready_timeout_s, process):
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
                raise RuntimeError(f"llama-server did not become healthy (status {process.poll()}):\n{tail}")
            yield OpenAIStreamClient(f"http://127.0.0.1:{port}")
        finally:
            stop_process_group(process, ((signal.SIGTERM, 15.0),), "llama-server")


Target = ModeTarget | LlamaServerTarget


def check_model_control(control: TritonClient) -> None:
    """Refuse early when the server cannot reload `llm` (not explicit mode, or no admin key)."""
    problem = control.model_control_problem()
    if problem:
        raise TritonError(problem)

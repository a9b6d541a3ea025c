"""What a benchmark run measures: the `llm` model in one scheduler mode of our engine, the
`llm` model on vLLM's engine, vLLM's own OpenAI server, or llama-server.

Our three modes are one model reloaded through Triton's model-control API with a config
override of `parameters.mode` (the tuner's mechanism: no restart, the repository on disk
untouched), starting from the config the server runs (the committed native one when the
server runs vLLM). vLLM inside Triton is the same model reloaded with configs/vllm.pbtxt. The
old instance is unloaded before the new one loads, so two engines (weights plus a preallocated
KV cache each) never share the machine's memory. vLLM's own server (what the Triton path costs:
the same engine, knobs and checkpoint, no Triton) and llama-server are started per run on a free
port and stopped afterwards; llama-server's `--parallel` slots are its continuous batch.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llm.serving.knobs import parameters_from_pbtxt, parse_knobs
from tools.contract import LLM_MODEL
from tools.load.llm.clients import OpenAIStreamClient, StreamClient, TritonStreamClient
from tools.paths import BUILD_DIR, MODEL_REPOSITORY, VLLM_PYTHON
from tools.repo.model_config import ModelConfig, load_config
from tools.serve.process_group import stop_process_group
from tools.triton_client import TritonClient, TritonError
from tools.triton_client.readiness import wait_for_http_ok

log = logging.getLogger(__name__)

MODES = ("iteration", "request", "none")
LLAMA_SERVER = "llama-server"
VLLM = "vllm"  # vLLM's engine inside Triton (the `llm` model with configs/vllm.pbtxt)
VLLM_SERVER = "vllm-server"  # vLLM's own OpenAI server, same engine, knobs and checkpoint
MODEL = LLM_MODEL
NATIVE_CONFIG = MODEL_REPOSITORY / MODEL / "config.pbtxt"
VLLM_CONFIG = MODEL_REPOSITORY / MODEL / "configs" / "vllm.pbtxt"


def engine_of_config(config) -> str:
    return config.parameters["engine"].string_value if "engine" in config.parameters else "native"


def mode_target_name(mode: str) -> str:
    return f"llm {mode}"


def parse_knob_overrides(text: str) -> dict[str, str]:
    """'weights=int4,dtype=auto' -> {knob: value} for our engine's targets (`--set`); every key
    and value is checked against the engine's knobs (llm.serving.knobs), so a typo fails here,
    not as a model that will not load."""
    overrides: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() in ("mode", "engine"):
            raise ValueError(f"an override is KNOB=VALUE for our engine (not mode or engine: --targets picks them); got {part!r}")
        overrides[key.strip()] = value.strip()
    parse_knobs({**parameters_from_pbtxt(NATIVE_CONFIG), **overrides})  # KnobError (a ValueError) names what is wrong
    return overrides


@dataclass(frozen=True)
class EngineVariant:
    """One set of our engine's knobs, measured as targets of its own (bench-llm `--set`). Several
    in one run put weight formats side by side, each at the stream counts it is meant for (int4 at
    one stream, bfloat16 where prompt chunks make the steps wide). The one unlabelled variant
    leaves the target names as they are."""

    knobs: Mapping[str, str] = field(default_factory=dict)
    label: str = ""
    concurrency: tuple[int, ...] | None = None  # closed-loop levels only; None: every level of the plan

    def target_name(self, base: str) -> str:
        return f"{base} [{self.label}]" if self.label else base


def parse_variant(text: str) -> EngineVariant:
    """'[LABEL[@STREAMS]:]KNOB=VALUE,...' -> EngineVariant, e.g. 'int4@1:weights=int4,dtype=auto'
    (streams comma-separated: 'bf16@16,32:dtype=auto'). Knobs as parse_knob_overrides checks them."""
    head, sep, knobs = text.partition(":")
    if not sep or "=" in head:
        return EngineVariant(parse_knob_overrides(text))
    label, at, streams = (part.strip() for part in head.partition("@"))
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", label):
        raise ValueError(f"a variant's label is letters, digits and _.+- (e.g. int4:weights=int4); got {label!r}")
    concurrency = None
    if at:
        try:
            concurrency = tuple(int(part) for part in streams.split(",") if part.strip())
        except ValueError:
            concurrency = ()
        if not concurrency or min(concurrency) <= 0:
            raise ValueError(f"variant {label!r}: streams are positive integers, e.g. {label}@1,16:...; got {streams!r}")
    return EngineVariant(parse_knob_overrides(knobs), label, concurrency)


def check_variants(variants: list[EngineVariant]) -> None:
    """Several variants need distinct labels: their targets' names tell them apart."""
    labels = [variant.label for variant in variants]
    if len(variants) > 1 and (not all(labels) or len(set(labels)) < len(labels)):
        raise ValueError(f"several --set variants need a distinct LABEL: each ('LABEL:KNOBS'); got labels {labels}")


def apply_mode(
    client: TritonClient, mode: str, model: str = MODEL, overrides: Mapping[str, str] | None = None, base: ModelConfig | None = None
) -> None:
    """Make `model` run `parameters.mode = mode` and the `overrides` on top of `base` (default: the
    config it runs now); a reload, unless its parameters are those already. Knob sets measured in
    turn pass the run's starting config as `base`: on top of the running one, a knob the previous
    set changed and this one does not name stayed (int4 weights measured as the bfloat16 set)."""
    wanted = {"mode": mode, **(overrides or {})}
    running = client.config(model)
    config = ModelConfig()
    config.CopyFrom(running if base is None else base)
    if engine_of_config(config) != "native":  # it runs vLLM: our engine's committed config, in `mode`
        config = load_config(NATIVE_CONFIG)
    for key, value in wanted.items():
        config.parameters[key].string_value = value
    if _parameters(config) == _parameters(running) and client.model_ready(model):
        return
    started = time.monotonic()
    client.reload(model, config)
    log.info("%s reloaded with %s in %.1f s", model, wanted, time.monotonic() - started)


def _parameters(config: ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


@contextlib.contextmanager
def openai_server(
    name: str, command_for: Callable[[int], list[str]], log_dir: Path, ready_timeout_s: float, stop_steps, env: dict | None = None
) -> Iterator[tuple[int, list[str]]]:
    """A server process with an OpenAI endpoint on a free port: (port, command) once its /health
    answers, the process group stopped by `stop_steps` afterwards; a failed start raises with the
    log's tail."""
    from tools.ports import free_ports

    (port,) = free_ports(1)
    command = command_for(port)
    log_path = log_dir / f"{name}-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting %s (log: %s)", " ".join(command), log_path)
    with open(log_path, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        if not wait_for_http_ok(f"http://127.0.0.1:{port}/health", ready_timeout_s, process):
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{name} did not become healthy (status {process.poll()}):\n{tail}")
        yield port, command
    finally:
        stop_process_group(process, stop_steps, name)


@dataclass
class ModeTarget:
    """The `llm` model on a Triton server, in one scheduler mode."""

    mode: str
    control: TritonClient
    grpc_url: str
    model: str = MODEL
    variant: EngineVariant = field(default_factory=EngineVariant)  # more knobs of ours (--set)
    base: ModelConfig | None = None  # the config the run started from: each variant's knobs go on top of it

    @property
    def name(self) -> str:
        return self.variant.target_name(mode_target_name(self.mode))

    @property
    def overrides(self) -> Mapping[str, str]:
        return self.variant.knobs

    def describe(self) -> str:
        knobs = "".join(f", {key}={value}" for key, value in self.overrides.items())
        return f"Triton `{self.model}` model, parameters.mode={self.mode}{knobs} (the rest as the server's config)"

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        apply_mode(self.control, self.mode, self.model, self.overrides, self.base)
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
        if not self.binary.is_file():
            raise FileNotFoundError(f"no llama-server at {self.binary}; build it with `make llama-server`")
        with openai_server(LLAMA_SERVER, self.command, self.log_dir, self.ready_timeout_s, ((signal.SIGTERM, 15.0),)) as (port, used):
            self.command_used = used
            yield OpenAIStreamClient(f"http://127.0.0.1:{port}")


@dataclass
class VllmTarget:
    """The `llm` model on vLLM's engine inside Triton: configs/vllm.pbtxt through the model-control API."""

    control: TritonClient
    grpc_url: str
    model: str = MODEL
    config_path: Path = VLLM_CONFIG
    name: str = VLLM

    def describe(self) -> str:
        return f"Triton `{self.model}` model on vLLM's V1 engine ({self.config_path.relative_to(MODEL_REPOSITORY.parent)})"

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        config = load_config(self.config_path)
        served = self.control.config(self.model)
        if not (self.control.model_ready(self.model) and served.parameters == config.parameters):
            started = time.monotonic()
            self.control.reload(self.model, config)
            log.info("%s reloaded on vLLM in %.1f s", self.model, time.monotonic() - started)
        yield TritonStreamClient(self.grpc_url, self.model)


@dataclass
class VllmServerTarget:
    """vLLM's own OpenAI server (`vllm.entrypoints.openai.api_server` in .venv-vllm) with the knobs of
    configs/vllm.pbtxt on the same checkpoint: vLLM without Triton."""

    checkpoint: Path
    config_path: Path = VLLM_CONFIG
    python: Path = VLLM_PYTHON
    name: str = VLLM_SERVER
    log_dir: Path = BUILD_DIR
    ready_timeout_s: float = 900.0  # it compiles the model first
    command_used: list[str] = field(default_factory=list)

    def command(self, port: int) -> list[str]:
        from llm.serving.knobs import parameters_from_pbtxt
        from llm.vllm_engine.knobs import VllmKnobs

        knobs = VllmKnobs.from_parameters(parameters_from_pbtxt(self.config_path))
        return [
            str(self.python),
            *("-m", "vllm.entrypoints.openai.api_server"),
            *knobs.server_flags(self.checkpoint),
            *("--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL),
        ]

    def describe(self) -> str:
        shown = " ".join(self.command_used[3:]) if self.command_used else ""
        return f"vLLM's own OpenAI server, the knobs of {self.config_path.name}: {shown}".rstrip(": ")

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        import os

        from llm.vllm_engine.knobs import SERVER_ENVIRONMENT

        if not self.python.is_file():
            raise FileNotFoundError(f"no vLLM environment at {self.python}; run `make vllm-venv`")
        stop = ((signal.SIGINT, 30.0), (signal.SIGTERM, 15.0))
        env = {**os.environ, **SERVER_ENVIRONMENT}
        with openai_server(VLLM_SERVER, self.command, self.log_dir, self.ready_timeout_s, stop, env) as (port, used):
            self.command_used = used
            yield OpenAIStreamClient(f"http://127.0.0.1:{port}", model=MODEL)


Target = ModeTarget | VllmTarget | VllmServerTarget | LlamaServerTarget


def check_model_control(control: TritonClient) -> None:
    """Refuse early when the server cannot reload `llm` (not explicit mode, or no admin key)."""
    problem = control.model_control_problem()
    if problem:
        raise TritonError(problem)

"""Measure the `llm` model live: reload it with scheduler knobs, drive one level, keep the records.

The reload is a config override through Triton's model-control API (the repository on disk
untouched), unloading first so two engines never hold a KV cache at once, as
tools.bench.llm.targets does for the mode. Levels run through tools.bench.llm's driver and
gRPC streaming client, so live and simulated figures are the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llm.serving.knobs import BACKEND_KEYS
from tools.bench.llm.driver import LevelDriver, Schedule
from tools.contract import LLM_MODEL
from tools.load.llm.clients import TritonStreamClient
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest, warmup_request
from tools.paths import BUILD_DIR
from tools.repo.model_config import ModelConfig
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import AdapterMix
from tools.triton_client import TritonClient

log = logging.getLogger(__name__)

VLLM_READY_TIMEOUT_S = 900.0  # vLLM compiles the model at its start (~35-75 s on 2 cores, minutes on a busy machine)


@dataclass
class LiveServer:
    control: TritonClient
    grpc_url: str
    model: str = LLM_MODEL
    # The config every reload starts from: None, the served one (the native engine's knobs
    # overlay it); for vLLM, configs/vllm.pbtxt's (its I/O, EXECUTION_ENV_PATH and every knob),
    # so a server running the native engine is switched over rather than given vLLM's keys.
    base_config: ModelConfig | None = None

    def apply(self, parameters: Mapping[str, str]) -> None:
        """Reload the model with these `parameters` changed (nothing when they already hold)."""
        served = self.control.config(self.model)
        config = ModelConfig()  # a copy: changing the served message itself would hide every change
        config.CopyFrom(served if self.base_config is None else self.base_config)
        for key, value in parameters.items():
            config.parameters[key].string_value = value
        if knobs_of(served) == knobs_of(config) and self.control.model_ready(self.model):
            return
        started = time.monotonic()
        unload = self.control.reload(self.model, config)
        self.unload_s.append(unload.seconds)
        self.reload_s.append(round(time.monotonic() - started, 1))
        log.info("%s reloaded with %s in %.1f s (unload: %s s)", self.model, dict(parameters), self.reload_s[-1], unload.seconds)

    reload_s: list[float] = field(default_factory=list)  # each reload's wall time (a vLLM start compiles the model)
    # each reload's unload time as the server's repository index showed it; None: the old instance
    # never unloaded within tools.triton_client.UNLOAD_WAIT_S (docs/llm.md, Known issues)
    unload_s: list[float | None] = field(default_factory=list)
    last_load_average: float | None = None  # the machine's 1-minute load when the last level started
    last_sent: int = 0  # requests the last level sent: where the next level may start in the workload

    @property
    def stuck_unloads(self) -> int:
        """Reloads whose old instance never unloaded (a slow unload that finished is not one)."""
        return self.unload_s.count(None)

    def measure(self, requests: Sequence[LlmRequest], schedule: Schedule, level: LevelPlan, slo: Slo) -> LevelFigures:
        records, duration = self.measure_records(requests, schedule, level)
        return LevelFigures.of(records, duration, slo)

    def measure_records(self, requests: Sequence[LlmRequest], schedule: Schedule, level: LevelPlan) -> tuple[list[StreamRecord], float]:
        """One level's records and measured seconds (for figures pooled over several levels)."""
        records, duration, self.last_load_average, self.last_sent = asyncio.run(
            _drive(self.grpc_url, self.model, requests, schedule, level)
        )
        return records, duration


def knobs_of(config: ModelConfig) -> dict[str, str]:
    """A config's parameters without those Triton rewrites when it loads a model (it serves
    EXECUTION_ENV_PATH's `$$TRITON_MODEL_DIRECTORY` resolved): what tells two configs' engines apart."""
    return {key: value.string_value for key, value in config.parameters.items() if key not in BACKEND_KEYS}


def engine_parameters(cost_engine: Mapping) -> dict[str, str]:
    """The engine knobs a cost model was measured with, for the live server to run the same
    engine: its thread count (a 2-thread engine on a crowded 2-core machine is not the
    engine a 1-thread calibration measured), dtype, weight format, decode attention and dense products; on vLLM its dtype, KV block size and
    compilation (vLLM takes its threads from the machine)."""
    if cost_engine.get("engine") == "vllm":
        return {key: str(cost_engine[key]).lower() if isinstance(cost_engine[key], bool) else str(cost_engine[key])
                for key in ("dtype", "block_size", "enforce_eager") if cost_engine.get(key) is not None}  # fmt: skip
    parameters = {}
    if cost_engine.get("threads"):
        parameters["num_threads"] = str(cost_engine["threads"])
    for key in ("dtype", "weights", "attention", "dense_kernel"):  # a model from before a knob measured its default
        if cost_engine.get(key):
            parameters[key] = str(cost_engine[key])
    return parameters


async def _drive(
    grpc_url: str, model: str, requests: Sequence[LlmRequest], schedule: Schedule, level: LevelPlan
) -> tuple[list[StreamRecord], float, float | None, int]:
    client = TritonStreamClient(grpc_url, model)
    await client.open()
    try:
        await client.generate(warmup_request(4), StreamRecord(-1, 0.0), time.perf_counter)  # not measured, shares no prompt
        driver = LevelDriver(client, requests, level.seconds, level.drain_s, seed=level.seed, first_request=level.first_request)
        run = await driver.run(schedule)
        return run.records, run.duration_s, run.load_average, run.sent
    finally:
        await client.close()


@contextlib.contextmanager
def live_server(
    url: str | None = None,
    grpc_url: str | None = None,
    admin_key: str | None = None,
    vllm_config: Path | None = None,
    adapters: AdapterMix | None = None,
) -> Iterator[LiveServer]:
    """A running server (its config restored at the end), or a local Triton with only `llm`.
    With `vllm_config` (a config of the vLLM engine), every reload starts from that file, and a
    local Triton serves `llm` on vLLM from its start (`--model-config-name=vllm`). With
    `adapters`, a local Triton serves them from a repository of its own (tools.lora.repository:
    the committed one untouched); a running server must already list them by the same names."""
    if adapters is not None and adapters.adapters and not url:
        with _repository_with(adapters) as repository, live_server_at(None, grpc_url, admin_key, vllm_config, repository) as server:
            yield server
        return
    with live_server_at(url, grpc_url, admin_key, vllm_config) as server:
        yield server


@contextlib.contextmanager
def _repository_with(adapters: AdapterMix) -> Iterator[Path]:
    import tempfile

    from llm.artifacts import CONFIG_FILE
    from llm.engine.checkpoint import LlamaDims
    from tools.contract import LLM_MODEL
    from tools.lora.repository import repository_with_adapters
    from tools.paths import MODEL_REPOSITORY

    dims = LlamaDims.from_json((MODEL_REPOSITORY / LLM_MODEL / "1" / CONFIG_FILE).read_text())
    with tempfile.TemporaryDirectory(prefix="llm-sim-adapters-", dir=BUILD_DIR if BUILD_DIR.is_dir() else None) as work:
        root = Path(work)
        yield repository_with_adapters(root, adapters.write(root / "adapters", dims))


@contextlib.contextmanager
def live_server_at(
    url: str | None = None,
    grpc_url: str | None = None,
    admin_key: str | None = None,
    vllm_config: Path | None = None,
    repository: Path | None = None,
) -> Iterator[LiveServer]:
    """live_server's work: `repository` is the local Triton's model repository (None: the committed one)."""
    from tools.contract import grpc_url_beside
    from tools.ports import free_ports
    from tools.repo.model_config import load_config
    from tools.serve.admin_key import headers_for
    from tools.serve.local_triton import LocalTriton, ServerOptions

    base = None if vllm_config is None else load_config(vllm_config)
    if url:
        control = TritonClient(url, headers_for(admin_key))
        problem = control.model_control_problem()
        if problem:
            raise RuntimeError(problem)
        with control.restoring(LLM_MODEL, control.config(LLM_MODEL), hint=f"reload {LLM_MODEL} through the model-control API"):
            yield LiveServer(control, grpc_url or grpc_url_beside(url), base_config=base)
        return
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        model_control_mode="explicit",
        load_models=(LLM_MODEL,),
        model_config_name=None if base is None else "vllm",
        **({} if repository is None else {"model_repository": repository}),
    )
    log_path = Path(BUILD_DIR) / f"triton-llm-sim-{http}.log"
    with LocalTriton(options, log_path=log_path).start(VLLM_READY_TIMEOUT_S if base is not None else 180.0) as server:
        yield LiveServer(server.client, options.grpc_url, base_config=base)

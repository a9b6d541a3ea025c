"""Measure the `llm` model live: reload it with scheduler knobs, drive one level, keep the records.

The reload is a config override through Triton's model-control API (the repository on disk
untouched), unloading first so two engines never hold a KV cache at once, as
tools.llmbench.targets does for the mode. Levels run through tools.llmbench's driver and
gRPC streaming client, so live and simulated figures are the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.contract import LLM_MODEL
from tools.llmbench.driver import LevelDriver, Schedule
from tools.load.llm.clients import TritonStreamClient
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest, warmup_request
from tools.paths import BUILD_DIR
from tools.simulate.llm.predict import LevelPlan
from tools.triton_client import TritonClient

log = logging.getLogger(__name__)


@dataclass
class LiveServer:
    control: TritonClient
    grpc_url: str
    model: str = LLM_MODEL

    def apply(self, parameters: Mapping[str, str]) -> None:
        """Reload the model with these `parameters` changed (nothing when they already hold)."""
        config = self.control.config(self.model)
        if all(config.parameters[key].string_value == value for key, value in parameters.items()) and self.control.model_ready(self.model):
            return
        for key, value in parameters.items():
            config.parameters[key].string_value = value
        started = time.monotonic()
        if not self.control.reload(self.model, config):
            self.stuck_unloads += 1
        log.info("%s reloaded with %s in %.1f s", self.model, dict(parameters), time.monotonic() - started)

    stuck_unloads: int = 0  # reloads whose old instance did not unload in time (docs/llm.md, Known issues)
    last_load_average: float | None = None  # the machine's 1-minute load when the last level started
    last_sent: int = 0  # requests the last level sent: where the next level may start in the workload

    def measure(self, requests: Sequence[LlmRequest], schedule: Schedule, level: LevelPlan, slo: Slo) -> LevelFigures:
        records, duration = self.measure_records(requests, schedule, level)
        return LevelFigures.of(records, duration, slo)

    def measure_records(self, requests: Sequence[LlmRequest], schedule: Schedule, level: LevelPlan) -> tuple[list[StreamRecord], float]:
        """One level's records and measured seconds (for figures pooled over several levels)."""
        records, duration, self.last_load_average, self.last_sent = asyncio.run(
            _drive(self.grpc_url, self.model, requests, schedule, level)
        )
        return records, duration


def engine_parameters(cost_engine: Mapping) -> dict[str, str]:
    """The engine knobs a cost model was measured with, for the live server to run the same
    engine: its thread count (a 2-thread engine on a crowded 2-core machine is not the
    engine a 1-thread calibration measured) and dtype."""
    parameters = {}
    if cost_engine.get("threads"):
        parameters["num_threads"] = str(cost_engine["threads"])
    if cost_engine.get("dtype"):
        parameters["dtype"] = str(cost_engine["dtype"])
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
def live_server(url: str | None = None, grpc_url: str | None = None, admin_key: str | None = None) -> Iterator[LiveServer]:
    """A running server (its config restored at the end), or a local Triton with only `llm`."""
    from tools.contract import grpc_url_beside
    from tools.ports import free_ports
    from tools.serve.admin_key import headers_for
    from tools.serve.local_triton import LocalTriton, ServerOptions

    if url:
        control = TritonClient(url, headers_for(admin_key))
        problem = control.model_control_problem()
        if problem:
            raise RuntimeError(problem)
        with control.restoring(LLM_MODEL, control.config(LLM_MODEL), hint=f"reload {LLM_MODEL} through the model-control API"):
            yield LiveServer(control, grpc_url or grpc_url_beside(url))
        return
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(http_port=http, grpc_port=grpc, metrics_port=metrics, model_control_mode="explicit", load_models=(LLM_MODEL,))
    log_path = Path(BUILD_DIR) / f"triton-llm-sim-{http}.log"
    with LocalTriton(options, log_path=log_path).start() as server:
        yield LiveServer(server.client, options.grpc_url)

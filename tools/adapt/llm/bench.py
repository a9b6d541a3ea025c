"""`python -m tools.adapt --model llm bench` (`make bench-adapt-llm`): the controller against a
few static settings, live, on one seeded bursty gamma trace.

A local Triton serves only `llm`, started with a fresh control key in its environment; every
static setting is set through the same live control request the controller uses (no reload
between runs, one engine for all), then the trace is replayed with tools.bench.llm's driver and
gRPC streaming client; last the controller runs from the default setting during a replay.
One run on a shared machine: differences of a few points are noise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import threading
import time
from dataclasses import asdict
from pathlib import Path

from tools.adapt.llm.control import LlmController, LlmSetting
from tools.adapt.llm.live import ControlChannel, MetricWindows, control_loop
from tools.adapt.llm.report import row, table, write_json
from tools.adapt.llm.settings import BenchSettings
from tools.contract import LLM_MODEL
from tools.load.llm.clients import TritonStreamClient
from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.streaming import StreamingRun, stream_load
from tools.load.llm.workload import LlmRequest, Tokenizer, Workload
from tools.load.schedules import Gamma, Phase
from tools.paths import BUILD_DIR, MODEL_REPOSITORY

log = logging.getLogger("adapt.llm")


async def _replay(grpc_url: str, requests: list[LlmRequest], phase: Phase, deadline_s: float, seed: int) -> StreamingRun:
    client = TritonStreamClient(grpc_url, LLM_MODEL)
    await client.open()
    try:
        warm = LlmRequest(-1, requests[0].prompt, requests[0].prompt_tokens, 4)
        await client.generate(warm, StreamRecord(-1, 0.0), time.perf_counter)  # not measured
        return await stream_load(client, requests, [phase], deadline_s=deadline_s, seed=seed)
    finally:
        await client.close()


def run_bench(settings: BenchSettings) -> int:
    from tools.ports import free_ports
    from tools.serve.local_triton import LocalTriton, ServerOptions

    requests = Workload(settings.prompt_lengths, settings.output_lengths, settings.requests, settings.seed).build(
        Tokenizer.from_file(MODEL_REPOSITORY / LLM_MODEL / "1" / "tokenizer.json")
    )
    phase = Phase(Gamma(settings.rate, settings.burstiness), settings.seconds)
    law, slo = settings.control.law, settings.control.slo
    key = secrets.token_urlsafe(24)
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(http_port=http, grpc_port=grpc, metrics_port=metrics, model_control_mode="explicit", load_models=(LLM_MODEL,))
    previous = os.environ.get("LLM_CONTROL_KEY")
    os.environ["LLM_CONTROL_KEY"] = key  # the server's environment: the stub reads it
    rows: list[dict] = []
    decisions = []
    try:
        with LocalTriton(options, log_path=Path(BUILD_DIR) / f"triton-adapt-llm-{http}.log").start():
            channel = ControlChannel(options.grpc_url, key)
            try:
                for budget in settings.budgets:
                    setting = LlmSetting(budget, 0.0)
                    channel.set(**asdict(setting))
                    run = asyncio.run(_replay(options.grpc_url, requests, phase, settings.deadline_s, settings.seed))
                    label = f"static budget {budget}, max-wait {setting.max_wait_ms:g} ms"
                    rows.append(row(label, LevelFigures.of(run.records, run.duration_s, slo), final=setting))
                    log.info("%s: %s", label, rows[-1]["figures"])
                channel.set(**asdict(law.default))
                controller = LlmController(law)
                stop = threading.Event()
                windows = MetricWindows(options.metrics_url)
                result: list = []
                thread = threading.Thread(
                    target=lambda: result.extend(control_loop(controller, channel, windows, settings.control.window_s, stop)), daemon=True
                )
                thread.start()
                run = asyncio.run(_replay(options.grpc_url, requests, phase, settings.deadline_s, settings.seed))
                stop.set()
                thread.join(30)
                decisions = result
                label = f"controller (from budget {law.default.max_num_batched_tokens})"
                figures = LevelFigures.of(run.records, run.duration_s, slo)
                rows.append(row(label, figures, sum(d.changed for d in decisions), controller.setting))
            finally:
                channel.close()
    finally:
        if previous is None:
            os.environ.pop("LLM_CONTROL_KEY", None)
        else:
            os.environ["LLM_CONTROL_KEY"] = previous
    title = f"live: gamma {settings.rate:g} req/s, burstiness {settings.burstiness:g}, {settings.seconds:g} s; SLO {slo.describe()}"
    print(table(rows, title))
    write_json(settings.json, {"rows": rows, "decisions": [d.to_dict() for d in decisions], "args": settings.command_line})
    return 0

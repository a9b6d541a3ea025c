"""Loadgen for a generative model: each load level streams the workload through the load
driver and reports per-token figures (TTFT, TPOT, ITL, end-to-end, tokens/s, goodput).

Unlike the embedding path there are no steady windows: a level's figures cover every
request it sent (as `vllm bench serve` and GenAI-Perf report), and one unrecorded request
streams first so the level does not pay for the first call's setup.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tools.contract import LLM_MODEL
from tools.load.llm.clients import GenerateStreamClient, OpenAIStreamClient, StreamClient, TritonStreamClient
from tools.load.llm.figures import LoadFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.streaming import run_streaming
from tools.load.llm.workload import LlmRequest, Tokenizer
from tools.load.schedules import ClosedLoop, Phase
from tools.loadgen.llm.args import LlmLoadSettings
from tools.loadgen.llm.report import LlmLevelResult
from tools.paths import MODEL_REPOSITORY

log = logging.getLogger("loadgen")

TOKENIZER = MODEL_REPOSITORY / LLM_MODEL / "1" / "tokenizer.json"


def is_generative(model_config: dict) -> bool:
    """A decoupled model streams its answer: loadgen drives it as a generative model."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled"))


def stream_client(settings: LlmLoadSettings, model: str, http_url: str, grpc_url: str) -> StreamClient:
    if settings.api == "openai":
        return OpenAIStreamClient(settings.openai_url or "", settings.openai_model)
    if settings.api == "generate-stream":
        return GenerateStreamClient(http_url, model)
    return TritonStreamClient(grpc_url, model)


def load_tokenizer(path: Path = TOKENIZER) -> Tokenizer:
    if not path.is_file():
        raise ValueError(f"no tokenizer at {path}: the LLM's export writes it (make export)")
    return Tokenizer.from_file(path)


def measure_level(settings: LlmLoadSettings, phase: Phase, requests: list[LlmRequest], client: StreamClient) -> LlmLevelResult:
    run = run_streaming(client, requests, [phase], settings.deadline_s, settings.seed)
    figures = LoadFigures.of(run.records, run.duration_s, settings.slo, run.late_sends)
    return LlmLevelResult(phase.label(), figures, run.records)


def warm_up(settings: LlmLoadSettings, requests: list[LlmRequest], client: StreamClient) -> StreamRecord:
    """One request before the levels, not reported."""
    run = run_streaming(client, requests[:1], [Phase(ClosedLoop(1, 1), settings.deadline_s)], settings.deadline_s)
    return run.records[0]


def measure_llm(settings: LlmLoadSettings, model: str, http_url: str, grpc_url: str) -> list[LlmLevelResult]:
    """Every level of `settings`, printed as it ends."""
    requests = settings.workload.build(load_tokenizer())
    log.info("workload: %s; API: %s; SLO: %s", settings.workload.describe(), settings.describe_api(), settings.slo.describe())
    warm = warm_up(settings, requests, stream_client(settings, model, http_url, grpc_url))
    if not warm.completed:
        raise ValueError(f"the warm-up request failed ({warm.outcome}): {warm.message}")
    results = []
    for index, phase in enumerate(settings.levels, start=1):
        log.info("[%d/%d] %s on %s", index, len(settings.levels), phase.label(), model)
        result = measure_level(settings, phase, requests, stream_client(settings, model, http_url, grpc_url))
        print(result.table(), flush=True)
        results.append(result)
    return results

"""Every step vLLM's engine executes, with its composition and duration, for the step cost model.
Run in .venv-vllm (tools/simulate/llm/vllm_calibrate.py does):

    .venv-vllm/bin/python -m llm.vllm_engine.step_recorder --model DIR --out steps.json < request.json

The request (JSON on standard input): {"parameters": {the vLLM config's parameters}, "scenarios":
[{"name": ..., "waves": [[{"prompt": tokens, "max_tokens": n, "seed": "a"}, ...], ...]}, ...],
"rounds": r}. A scenario's first wave is sent at once; each later wave when every request of the
one before has its first token (so a prompt joins running decodes); a scenario ends when all its
requests did, and the next starts on an idle engine. Requests with the same `seed` share their
prompt's first tokens (a later one finds the earlier one's full blocks in the prefix cache);
every round draws fresh tokens, so no round hits an earlier round's cache.

What is recorded: vLLM's V1 engine core runs in a process of its own (as served), so the engine is
built with `scheduler_cls` = RecordingScheduler, vLLM's scheduler plus a clock: schedule() is
timed from its start and update_from_output() to its end, and each executed step's composition
(per request: tokens scheduled, tokens already computed, prompt length) read from the scheduler's
own requests, written as JSON lines to the file named by $LLM_STEP_RECORD. vLLM's own iteration
details (enable_logging_iteration_details: elapsed_ms, the model's execution without the
scheduler's work) come back through a stat logger in this process and are joined per step, so
the recorded times can be checked against vLLM's. The output: {"steps": [...], "vllm": version,
"knobs": {...}, "kv_blocks": n, "engine_start_s": s, "seconds": s}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from vllm.v1.core.sched.scheduler import Scheduler

RECORD_ENV = "LLM_STEP_RECORD"  # the JSON-lines file the engine core's scheduler appends each step to
SCHEDULER_CLASS = "llm.vllm_engine.step_recorder.RecordingScheduler"
FIRST_TOKEN, LAST_TOKEN = 1000, 30000  # prompt token ids are drawn in this range (SmolLM2: 49,152 tokens)


class RecordingScheduler(Scheduler):
    """vLLM's scheduler, unchanged, plus one JSON line per executed step (runs in the engine core)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        path = os.environ.get(RECORD_ENV)
        self._sink = open(path, "a", buffering=1) if path else None  # noqa: SIM115 (open for the engine's life)
        self._pending: tuple[float, float, list[list[int]]] | None = None
        self._index = 0  # counts steps with tokens, as vLLM's iteration_index does

    def schedule(self, *args, **kwargs):
        started = time.monotonic()
        output = super().schedule(*args, **kwargs)
        if self._sink is not None and output.total_num_scheduled_tokens > 0:
            chunks = []
            for request_id, count in output.num_scheduled_tokens.items():
                request = self.requests[request_id]  # num_computed_tokens already counts this step's tokens
                chunks.append([count, request.num_computed_tokens - count, request.num_prompt_tokens])
            self._pending = (started, time.monotonic(), chunks)
        return output

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        if self._pending is not None:
            started, scheduled, chunks = self._pending
            self._pending = None
            line = {
                "index": self._index,
                "started": started,
                "scheduled_s": round(scheduled - started, 6),
                "ended": time.monotonic(),
                "busy_after": bool(self.has_requests()),  # the engine core's loop steps again at once
                "chunks": chunks,
            }
            self._index += 1
            self._sink.write(json.dumps(line) + "\n")
        return outputs


def prompt_tokens(seed: str, length: int) -> list[int]:
    generator = random.Random(seed)
    return [generator.randrange(FIRST_TOKEN, LAST_TOKEN) for _ in range(length)]


def iteration_logger(details: list[dict]):
    """A StatLoggerBase factory keeping vLLM's iteration details of each step."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class IterationDetailsLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0) -> None:
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            item = getattr(scheduler_stats, "iteration_details", None)
            if item is not None and not item.is_dummy:
                details.append(
                    {
                        "index": item.iteration_index,
                        "elapsed_ms": item.elapsed_ms,
                        "ctx_tokens": item.num_ctx_tokens,
                        "generation_requests": item.num_generation_requests,
                    }
                )

        def log_engine_initialized(self) -> None:
            pass

    return IterationDetailsLogger


def run_scenario(engine, scenario: dict, tag: str, ids) -> None:
    """Send the scenario's waves (each when the one before has all its first tokens) and step
    the engine until every request finished."""
    from vllm import SamplingParams, TokensPrompt

    waves = [list(wave) for wave in scenario["waves"]]
    tokens_of: dict[str, int] = {}

    def send(wave: list[dict]) -> list[str]:
        sent = []
        for item in wave:
            request_id = f"{tag}-{next(ids)}"
            seed = f"{tag}-{item.get('seed', request_id)}"
            params = SamplingParams(max_tokens=int(item["max_tokens"]), temperature=0.0, ignore_eos=True)
            engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt_tokens(seed, int(item["prompt"]))), params)
            tokens_of[request_id] = 0
            sent.append(request_id)
        return sent

    current = send(waves.pop(0))
    while engine.has_unfinished_requests():
        for output in engine.step():
            tokens_of[output.request_id] = tokens_of.get(output.request_id, 0) + len(output.outputs[0].token_ids)
        if waves and all(tokens_of[request_id] > 0 for request_id in current):
            current = send(waves.pop(0))
    while waves:  # the last wave ended before the next was due: send it on an idle engine
        current = send(waves.pop(0))
        while engine.has_unfinished_requests():
            engine.step()


def record_steps(model: Path, parameters: dict[str, str], scenarios: list[dict], rounds: int, record: Path) -> dict:
    import itertools

    from vllm import __version__ as vllm_version
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    from llm.vllm_engine.knobs import SERVER_ENVIRONMENT, VllmKnobs

    for key, value in SERVER_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    record.unlink(missing_ok=True)
    os.environ[RECORD_ENV] = str(record)  # inherited by the engine core's process
    knobs = VllmKnobs.from_parameters(parameters)
    details: list[dict] = []
    started = time.monotonic()
    args = EngineArgs(
        **knobs.engine_args(model),
        scheduler_cls=SCHEDULER_CLASS,
        disable_log_stats=False,
        enable_logging_iteration_details=True,
    )
    engine = LLMEngine.from_engine_args(args, stat_loggers=[iteration_logger(details)])
    engine_start_s = time.monotonic() - started
    ids = itertools.count()
    try:
        for number in range(rounds):
            for scenario in scenarios:
                run_scenario(engine, scenario, f"r{number}", ids)
        kv_blocks = engine.vllm_config.cache_config.num_gpu_blocks
    finally:
        engine.engine_core.shutdown()
    steps = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    by_index = {item["index"]: item for item in details}
    for step in steps:
        item = by_index.get(step["index"])
        if item is not None:
            step["vllm_elapsed_ms"] = round(item["elapsed_ms"], 3)
            step["vllm_ctx_tokens"] = item["ctx_tokens"]
            step["vllm_generation_requests"] = item["generation_requests"]
    return {
        "steps": steps,
        "vllm": vllm_version,
        "knobs": {key: getattr(knobs, key) for key in knobs.__dataclass_fields__},
        "kv_blocks": kv_blocks,
        "engine_start_s": round(engine_start_s, 1),
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="the Hugging Face checkpoint folder")
    parser.add_argument("--out", type=Path, required=True, help="where the recorded steps go (JSON)")
    args = parser.parse_args()
    request = json.load(sys.stdin)
    record = args.out.with_suffix(".jsonl")
    result = record_steps(args.model, request["parameters"], request["scenarios"], int(request.get("rounds", 1)), record)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()

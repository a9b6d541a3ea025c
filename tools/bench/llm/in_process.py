"""Our engine with no server around it: the `engine-loop` target of bench-llm.

The same EngineLoop, executor and knobs the `llm` model runs (config.pbtxt's parameters, the
exported checkpoint), driven in this process by the benchmark's own driver and workload. Set
beside the served `iteration` target, the two measure what the Triton path costs our engine
(responses through the Python backend's IPC, cancellation polls, the gRPC client): the goal is
the served tokens/s at >= 0.9x these. The client tokenises the raw prompt as the model does
(`LlmTokenizer.encode`, no chat template) and asks for the same greedy, EOS-ignored tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llm.artifacts import gate_refusal
from llm.contract import GenerationRequest, RequestOutput, SamplingParams
from llm.engine.executor import LlamaExecutor
from llm.engine.precision import resolve_dtype
from llm.loop import EngineLoop
from llm.serving.knobs import parameters_from_pbtxt, parse_knobs
from llm.tokenizer import LlmTokenizer
from tools.load.llm.clients import Clock, StreamClient, StreamError
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.paths import MODEL_REPOSITORY

ENGINE_LOOP = "engine-loop"


class EngineLoopClient:
    """A StreamClient over an EngineLoop of this process: each output the engine thread hands
    back is carried onto the event loop (call_soon_threadsafe) and timed there, as a network
    client times a response's arrival."""

    name = "in process (EngineLoop.submit, outputs carried onto the event loop)"

    def __init__(self, loop: EngineLoop, tokenizer: LlmTokenizer) -> None:
        self.loop, self.tokenizer = loop, tokenizer
        self._ids = itertools.count()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def generate(self, request: LlmRequest, record: StreamRecord, clock: Clock) -> None:
        event_loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()
        request_id = f"bench-{request.index}-{next(self._ids)}"
        params = SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True)
        prompt_ids = self.tokenizer.encode(request.prompt)
        record.tokens_in = len(prompt_ids)

        def hand_over(output: RequestOutput) -> None:  # on the engine thread
            with contextlib.suppress(RuntimeError):  # the client's loop closed: a request cut at a level's end ended after it
                event_loop.call_soon_threadsafe(outputs.put_nowait, output)

        self.loop.submit(GenerationRequest(request_id, prompt_ids, params, time.monotonic()), hand_over)
        finished = False
        try:
            while not finished:
                output = await outputs.get()
                now = clock()
                if output.error is not None:
                    finished = True
                    raise StreamError(output.error)
                record.add_tokens(now, len(output.new_token_ids))
                if output.finished:
                    record.finish_reason, record.end_s, finished = output.finish_reason, now, True
        finally:
            if not finished:
                self.loop.cancel(request_id)  # the level cut it: the engine frees its slot, as for a client that left


@dataclass
class EngineLoopTarget:
    """The committed config's engine (iteration mode) in this process, no Triton."""

    config_path: Path = MODEL_REPOSITORY / "llm" / "config.pbtxt"
    overrides: Mapping[str, str] = field(default_factory=dict)  # more knobs (bench-llm --set), as the served targets get them
    name: str = ENGINE_LOOP
    settings: str = field(default="", init=False)

    def describe(self) -> str:
        return f"our engine in the benchmark's process, no server: {self.settings}".rstrip(": ")

    @contextlib.contextmanager
    def serving(self) -> Iterator[StreamClient]:
        parameters = {**parameters_from_pbtxt(self.config_path), **self.overrides, "mode": "iteration"}
        scheduler_config, engine_config = parse_knobs(parameters)
        engine_config = dataclasses.replace(engine_config, dtype=resolve_dtype(engine_config.dtype, engine_config.device))
        folder = self.config_path.parent / "1"
        refusal = gate_refusal(folder, engine_config.weights, engine_config.dtype)
        if refusal is not None:  # as the model refuses to load it
            raise ValueError(refusal)
        tokenizer = LlmTokenizer.from_folder(folder)
        loop = EngineLoop.launch(lambda: LlamaExecutor.from_checkpoint(folder, engine_config), scheduler_config, tokenizer)
        self.settings = f"{self.config_path.relative_to(MODEL_REPOSITORY.parent)} ({scheduler_config}; {engine_config})"
        try:
            yield EngineLoopClient(loop, tokenizer)
        finally:
            loop.stop()

"""vLLM's V1 async engine (AsyncLLM) inside the `llm` model, when parameters.engine is vllm.

Runs in the model's Python-backend stub, in .venv-vllm. The engine lives on an asyncio loop of
its own thread (as in Triton's vLLM backend); vLLM runs the engine core and its worker in
processes of their own. execute() parses and checks each request on Triton's thread with the
native engine's rules (llm/serving/request.py: the same I/O, the same 4xx messages), then hands
a coroutine to the loop and returns at once; each vLLM output (RequestOutputKind.DELTA) becomes
our RequestOutput and the same ResponsePlan decides what is sent, so both engines answer alike.

What vLLM leaves to its server and we do here:
- a client that leaves: a poller asks `response_sender.is_cancelled()` of the open requests in
  turn (all of them every 0.1 s up to 16 open, more spread over several ticks: each question is
  a round trip to the Triton process) and cancels that request's task; vLLM's generate() then
  aborts it in the engine, freeing its KV blocks, and the client gets CANCELLED;
- a full server: beyond max_num_seqs + max_waiting requests in flight a new one is refused
  (UNAVAILABLE, "server busy"), as the native engine refuses past max_waiting;
- `queue_timeout_ms`: vLLM does not say when a request is first scheduled, so the deadline is
  the first output token: a request with no token by then is aborted with "server busy";
- metrics: llm/vllm_engine/stat_logger.py.
The live-control channel (llm_control) drives the native engine's loop and is refused here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import locale
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from llm.adapters import ADAPTER_LIST, read_adapter_list
from llm.artifacts import HF_FOLDER, HF_REQUIRED_FILES
from llm.contract import RequestTimings, check_request_fits
from llm.metrics import LlmMetrics
from llm.serving.control import control_request
from llm.serving.request import ParsedRequest, RequestError, parse_request
from llm.serving.responses import ResponsePlan
from llm.serving.triton_io import TritonIO
from llm.tokenizer import LlmTokenizer
from llm.vllm_engine.convert import OutputTracker, sampling_kwargs
from llm.vllm_engine.knobs import SERVER_ENVIRONMENT, VllmKnobs

POLL_INTERVAL_S = 0.1
POLLS_PER_TICK = 16
UNLOAD_MESSAGE = "cannot serve the request: the model is being unloaded"  # the gateway maps "cannot serve" to 503


class ServerBusy(Exception):
    """More requests in flight than the engine's slots and waiting room (UNAVAILABLE)."""


@dataclass
class OpenRequest:
    request_id: str
    sender: object  # Triton's response sender
    parsed: ParsedRequest
    plan: ResponsePlan
    tracker: OutputTracker
    deadline: float | None  # time.monotonic() by which its first token must come (queue_timeout_ms)
    task: asyncio.Task | None = None
    started: bool = False  # a first output came
    ending: str | None = None  # why the adapter cancelled it: abort (client gone), timeout, unload
    created: float = field(default_factory=time.monotonic)


def served_adapters(version: Path, pb_utils: ModuleType) -> dict:
    """The version folder's multi_lora.json as vLLM LoRARequests by name (ids from 1, as Triton's
    vLLM backend numbers them). Each adapter is read first with the native engine's rules, so a
    malformed one is refused at load with its reason and the others serve."""
    from vllm.lora.request import LoRARequest

    from llm.artifacts import CONFIG_FILE
    from llm.engine.checkpoint import LlamaDims
    from llm.engine.lora import read_adapters

    listed = read_adapter_list(version / ADAPTER_LIST) if (version / ADAPTER_LIST).is_file() else {}
    usable, refused = read_adapters(listed, LlamaDims.from_json((version / CONFIG_FILE).read_text()))
    for name, reason in refused.items():
        pb_utils.Logger.log_error(f"llm: LoRA adapter {name!r} is not served: {reason}")
    return {name: LoRARequest(name, index, str(listed[name])) for index, name in enumerate(usable, start=1)}


class VllmServing:
    def __init__(self, pb_utils: ModuleType, args: dict, parameters: dict[str, str]) -> None:
        started = time.monotonic()
        self.pb = pb_utils
        self.io = TritonIO(pb_utils)
        self.knobs = VllmKnobs.from_parameters(parameters)
        folder = Path(args["model_repository"]) / args["model_version"] / HF_FOLDER
        missing = [name for name in HF_REQUIRED_FILES if not (folder / name).is_file()]
        if missing:
            raise pb_utils.TritonModelException(f"no vLLM checkpoint in {folder} (missing {', '.join(missing)}); run `make export`")
        for key, value in SERVER_ENVIRONMENT.items():  # unless the environment says otherwise
            os.environ.setdefault(key, value)
        # The stub's interpreter starts with an isolated config, which leaves the C locale: files
        # open as ASCII, and importing vLLM (torch inductor's templates) failed on UTF-8 bytes.
        locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
        self.tokenizer = LlmTokenizer.from_folder(folder)
        self.adapters = served_adapters(folder.parent, pb_utils) if self.knobs.enable_lora else {}
        self.metrics = LlmMetrics(pb_utils, {"model": args["model_name"], "version": args["model_version"]})
        self._ids = itertools.count()
        self._open: dict[str, OpenRequest] = {}  # touched on the loop's thread only
        self._in_flight = 0
        self._lock = threading.Lock()
        self._cursor = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        try:
            self.engine = self._call(self._start_engine(folder))
        except BaseException:
            self._stop_loop()
            raise
        self._poller = asyncio.run_coroutine_threadsafe(self._poll(), self.loop)
        pb_utils.Logger.log_info(f"llm: vLLM engine on {folder} started in {time.monotonic() - started:.1f} s; {self.knobs}")

    def _call(self, coroutine: Coroutine):
        """Run `coroutine` on the engine's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _start_engine(self, folder: Path):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from llm.vllm_engine.stat_logger import triton_stat_logger

        engine_args = AsyncEngineArgs(
            **self.knobs.engine_args(folder),
            disable_log_stats=True,  # vLLM's own loggers (its log lines, its prometheus registry) off; ours on
            enable_logging_iteration_details=True,  # each step's composition and time, for the step metrics
        )
        return AsyncLLM.from_engine_args(engine_args, stat_loggers=[triton_stat_logger(self.metrics)])

    # Triton's thread
    def execute(self, requests) -> None:
        self.io.serve_each(requests, self._submit, busy=(ServerBusy,))

    def _submit(self, request, sender) -> None:
        arrival = time.monotonic()
        raw_parameters = request.parameters()
        if control_request(json.loads(raw_parameters or "{}")):
            raise RequestError("llm_control retunes the native engine's loop; with engine vllm, reload the model with a config override")
        limit = self.knobs.max_model_len
        parsed = parse_request(self.io.inputs(request), max_tokens_limit=limit - 1, request_parameters=raw_parameters)
        name = parsed.params.lora_name
        if name is not None and name not in self.adapters:
            served = ", ".join(sorted(self.adapters)) or ("none" if self.knobs.enable_lora else "none (parameters.enable_lora is false)")
            raise RequestError(f"unknown LoRA adapter {name!r} (lora_name); this model serves: {served}")
        prompt_ids = self.tokenizer.encode(parsed.prompt)
        check_request_fits(len(prompt_ids), parsed.params.max_tokens, limit)  # vLLM sizes its KV cache itself
        with self._lock:
            if self._in_flight >= self.knobs.max_in_flight:
                raise ServerBusy(
                    f"{self._in_flight} requests in flight, the most this model takes "
                    f"(max_num_seqs {self.knobs.max_num_seqs} + max_waiting {self.knobs.max_waiting})"
                )
            self._in_flight += 1
        request_id = f"llm-{next(self._ids)}"
        timeout_ms = parsed.params.queue_timeout_ms
        open_request = OpenRequest(
            request_id,
            sender,
            parsed,
            ResponsePlan(parsed),
            OutputTracker(request_id, len(prompt_ids)),
            deadline=None if timeout_ms is None else arrival + timeout_ms / 1000.0,
        )
        try:
            asyncio.run_coroutine_threadsafe(self._serve(open_request, prompt_ids), self.loop)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1

    # the loop's thread
    async def _serve(self, request: OpenRequest, prompt_ids: list[int]) -> None:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        request.task = asyncio.current_task()
        self._open[request.request_id] = request
        try:
            sampling = SamplingParams(**sampling_kwargs(request.parsed.params), output_kind=RequestOutputKind.DELTA)
            # token ids we counted and checked, rendered as vLLM's own server does (no second tokenization)
            (prompt,) = self.engine.renderer.render_cmpl([TokensPrompt(prompt_token_ids=prompt_ids)])
            adapter = self.adapters.get(request.parsed.params.lora_name)  # None: the base model
            async for output in self.engine.generate(
                prompt, sampling, request.request_id, lora_request=adapter, priority=request.parsed.params.priority
            ):
                request.started = True
                self._send(request, request.tracker.convert(output))
        except asyncio.CancelledError:
            self._finish_here(request, self._ended(request))
        except Exception as exc:
            self._finish_here(request, request.tracker.ended("error", f"the vLLM engine failed this request: {exc}"))
        finally:
            self._open.pop(request.request_id, None)
            self._release()

    def _finish_here(self, request: OpenRequest, output) -> None:
        """End a request vLLM did not finish itself; vLLM reports no statistics for a request
        its front end aborted, so its finish (abort, timeout, error) is counted here."""
        self._send(request, output)
        timings = RequestTimings(
            request.request_id,
            queue_s=None,
            ttft_s=None,
            e2e_s=time.monotonic() - request.created,
            prompt_tokens=output.num_prompt_tokens,
            output_tokens=output.num_output_tokens,
            finish_reason=output.finish_reason,
        )
        self.metrics.on_finished(timings)

    def _ended(self, request: OpenRequest):
        if request.ending == "timeout":
            timeout = request.parsed.params.queue_timeout_ms
            return request.tracker.ended("timeout", f"queue timeout: no first token within queue_timeout_ms={timeout:g}")
        if request.ending == "unload":
            return request.tracker.ended("error", UNLOAD_MESSAGE)
        return request.tracker.ended("abort")

    def _send(self, request: OpenRequest, output) -> None:
        try:
            for reply in request.plan.replies(output):
                self.io.send_reply(request.sender, request.parsed, reply)
        except Exception as exc:  # the sender is gone (the client left mid-send): nothing more to tell it
            self.pb.Logger.log_warn(f"llm: could not answer {request.request_id}: {exc}")

    async def _poll(self) -> None:
        """Cancel the requests whose client left or whose first token is overdue."""
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            now = time.monotonic()
            requests = [request for request in self._open.values() if request.ending is None and request.task is not None]
            for request in requests:
                if request.deadline is not None and not request.started and now > request.deadline:
                    self._cancel(request, "timeout")
            if not requests:
                continue
            count = min(POLLS_PER_TICK, len(requests))
            start = self._cursor % len(requests)
            self._cursor = start + count
            for request in (requests + requests)[start : start + count]:
                if request.ending is None and request.sender.is_cancelled():
                    self._cancel(request, "abort")

    @staticmethod
    def _cancel(request: OpenRequest, reason: str) -> None:
        request.ending = reason
        request.task.cancel()

    async def _shutdown(self) -> None:
        self._poller.cancel()
        tasks = []
        for request in list(self._open.values()):
            if request.task is not None and request.ending is None:
                self._cancel(request, "unload")
                tasks.append(request.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        self.engine.shutdown()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.metrics.close()

    def finalize(self) -> None:
        started = time.monotonic()
        self.pb.Logger.log_info("llm: finalize: stopping the vLLM engine")
        try:
            self._call(self._shutdown())
        finally:
            self._stop_loop()
        self.pb.Logger.log_info(f"llm: finalized in {time.monotonic() - started:.1f} s")

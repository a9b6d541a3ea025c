"""The generative LLM as a decoupled Triton Python model, on one of two engines.

`parameters.engine` picks it: `native` (config.pbtxt: our engine, llm/) or `vllm`
(configs/vllm.pbtxt: vLLM's V1 async engine, llm/vllm_engine/serving.py, in vLLM's own
environment). Both take the I/O of Triton's vLLM backend, parsed and validated by
llm/serving/request.py, and end every request with exactly one response flagged FINAL: its
last text, or an error (INVALID_ARG for bad input, UNAVAILABLE when the server is full or a
request waited past its queue_timeout_ms, CANCELLED when the client went away).

The native adapter below is thin: execute() submits each request to the one EngineLoop and
returns at once; the engine thread runs the iteration-level scheduler and calls back with each
step's output, which becomes zero or more responses (llm/serving/responses.py) queued to one
sending thread (llm/serving/send_queue.py), so the engine never waits on a send.
`response_sender.is_cancelled` is asked by the loop (each running request every 100 ms, a
waiting one before it is admitted), the routine questions on that same sending thread, so a
client that disconnects frees its KV blocks within a step or two. Knobs come from the config's
`parameters` (llm/serving/knobs.py); the checkpoint and tokenizer files are the version folder's, written by
`make export`, whose manifest must record a passed parity gate for the format served (weights and
dtype). A request whose parameters carry `llm_control` (and the control key) changes the token
budget or max-wait live instead of generating (llm/serving/control.py; tools.adapt --model llm
uses it).
"""

import dataclasses
import functools
import itertools
import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from llm.artifacts import CONFIG_FILE, gate_refusal
from llm.contract import GenerationRequest
from llm.engine import LlamaExecutor
from llm.engine.precision import resolve_dtype
from llm.loop import EngineLoop, QueueFullError
from llm.metrics import LlmMetrics
from llm.serving.control import ControlRefused, control_request, parse_control
from llm.serving.knobs import engine_of, parameters_from_json, parse_knobs
from llm.serving.request import parse_request
from llm.serving.responses import ResponsePlan
from llm.serving.send_queue import SendQueue
from llm.serving.triton_io import TritonIO
from llm.tokenizer import LlmTokenizer


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("the llm model streams: set model_transaction_policy { decoupled: true }")
        parameters = parameters_from_json(config)
        if engine_of(parameters) == "vllm":
            from llm.vllm_engine.serving import VllmServing

            self.serving = VllmServing(pb_utils, args, parameters)
        else:
            self.serving = NativeServing(args, parameters)

    def execute(self, requests):
        self.serving.execute(requests)
        return None

    def finalize(self) -> None:
        self.serving.finalize()


class NativeServing:
    """Our engine (llm/): one EngineLoop thread batching every step."""

    def __init__(self, args: dict, parameters: dict[str, str]) -> None:
        self.io = TritonIO(pb_utils)
        self.scheduler_config, engine_config = parse_knobs(parameters)
        # `dtype: auto` resolved once here: the logs and the gate check name what actually runs
        self.engine_config = dataclasses.replace(engine_config, dtype=resolve_dtype(engine_config.dtype, engine_config.device))
        folder = Path(args["model_repository"]) / args["model_version"]
        if not (folder / CONFIG_FILE).is_file():
            raise pb_utils.TritonModelException(f"no exported checkpoint in {folder}; run `make export`")
        refusal = gate_refusal(folder, self.engine_config.weights, self.engine_config.dtype)
        if refusal is not None:
            raise pb_utils.TritonModelException(f"llm: not loading: {refusal}")
        started = time.monotonic()
        self.tokenizer = LlmTokenizer.from_folder(folder)
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.metrics = LlmMetrics(pb_utils, labels) if hasattr(pb_utils, "MetricFamily") else None
        engine_config = self.engine_config
        # responses, and the loop's routine cancellation questions: IPC round trips off the engine thread
        self.sends = SendQueue()
        try:
            self.loop = EngineLoop.launch(
                lambda: LlamaExecutor.from_checkpoint(folder, engine_config),
                self.scheduler_config,
                self.tokenizer,
                observer=self.metrics,
                ask_off_thread=self.sends.put,
            )
        except BaseException:
            self.sends.close()  # a failed load leaves no thread behind
            raise
        self.max_model_len = self.loop.executor.max_model_len
        self.engine_config = self.loop.executor.config  # with `attention: auto` resolved too, for the log below
        for name, reason in self.loop.executor.adapter_errors.items():
            pb_utils.Logger.log_error(f"llm: LoRA adapter {name!r} is not served (the others are): {reason}")
        if self.metrics is not None:
            self.metrics.watch(self.loop.snapshot)
        self._ids = itertools.count()
        pb_utils.Logger.log_info(
            f"llm: {folder} loaded in {time.monotonic() - started:.1f} s; {self.scheduler_config}; {self.engine_config}; "
            f"LoRA adapters: {', '.join(sorted(self.loop.executor.adapter_slots)) or 'none'}"
        )

    def execute(self, requests) -> None:
        self.io.serve_each(requests, self._submit, busy=(QueueFullError,))

    def _submit(self, request, sender) -> None:
        arrival = time.monotonic()
        parameters = json.loads(request.parameters() or "{}")
        if control_request(parameters):
            self._control(parameters, sender)  # a ValueError from it is answered as INVALID_ARG
            return
        inputs = self.io.inputs(request)
        parsed = parse_request(inputs, max_tokens_limit=self.max_model_len - 1, request_parameters=request.parameters())
        prompt_ids = self.tokenizer.encode(parsed.prompt)
        generation = GenerationRequest(f"llm-{next(self._ids)}", prompt_ids, parsed.params, arrival)
        # submit refuses what can never fit (llm.contract.check_request_fits): INVALID_ARG
        self.loop.submit(generation, self._responder(parsed, sender), is_cancelled=sender.is_cancelled)

    def _control(self, parameters: dict, sender) -> None:
        """Apply a control request's step limits between steps; answer with the limits in force."""
        try:
            config = self.loop.update_config(**parse_control(parameters))
        except ControlRefused as exc:
            self.io.send_error(sender, f"refused: {exc}", "INVALID_ARG")
            return
        limits = {"max_num_batched_tokens": config.max_num_batched_tokens, "max_wait_ms": config.max_wait_ms}
        pb_utils.Logger.log_info(f"llm: live control set {limits}")
        text = np.array([json.dumps(limits).encode()], dtype=np.object_)
        sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", text)]), flags=self.io.FINAL)

    def _responder(self, parsed, sender):
        plan = ResponsePlan(parsed)

        def on_output(output) -> None:
            for reply in plan.replies(output):
                self.sends.put(functools.partial(self.io.send_reply, sender, parsed, reply))

        return on_output

    def finalize(self) -> None:
        # logged on both sides: when an unload hangs, the log tells whether Triton got as far as
        # finalize (docs/llm.md, Known issues)
        started = time.monotonic()
        pb_utils.Logger.log_info("llm: finalize: stopping the engine loop")
        self.loop.stop(timeout_s=10)
        if not self.sends.close(timeout_s=10):
            pb_utils.Logger.log_warn("llm: finalize: responses still being sent after 10 s")
        if self.metrics is not None:
            self.metrics.close()
        pb_utils.Logger.log_info(f"llm: finalized in {time.monotonic() - started:.1f} s")

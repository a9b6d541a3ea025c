"""The generative LLM as a decoupled Triton Python model.

A thin adapter: execute() parses and validates each request (llm/serving/request.py), submits
it to the one EngineLoop and returns at once; the engine thread runs the iteration-level
scheduler and calls back with each step's output, which becomes zero or more responses
(llm/serving/responses.py) sent from that thread. Every request ends with one response
flagged FINAL: its last text, or an error (INVALID_ARG for bad input, UNAVAILABLE when the
waiting queue is full or the request waited past its queue_timeout_ms, CANCELLED when the
client went away). `response_sender.is_cancelled`
is polled by the loop once per step, so a client that disconnects frees its KV blocks
within a step. Knobs come from the config's `parameters` (llm/serving/knobs.py); the
checkpoint and tokenizer files are the version folder's, written by `make export`. A request
whose parameters carry `llm_control` (and the control key) changes the token budget or
max-wait live instead of generating (llm/serving/control.py; tools.adapt --model llm uses it).
"""

import itertools
import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from llm.artifacts import CONFIG_FILE
from llm.contract import GenerationRequest, RequestOutput
from llm.engine import LlamaExecutor
from llm.loop import EngineLoop, QueueFullError
from llm.metrics import LlmMetrics
from llm.serving.control import ControlRefused, control_request, parse_control
from llm.serving.knobs import parameters_from_json, parse_knobs
from llm.serving.request import RETURN_FLAGS, ParsedRequest, RequestError, check_fits, parse_request
from llm.serving.responses import Reply, ResponsePlan
from llm.tokenizer import LlmTokenizer

OPTIONAL_INPUTS = ("stream", "sampling_parameters", "exclude_input_in_output", *RETURN_FLAGS)
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _error(message: str, code_name: str):
    code = getattr(pb_utils.TritonError, code_name, None)
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


def _first(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy().reshape(-1)
    if not array.size:
        return None
    value = array[0]  # bytes for TYPE_STRING, numpy.bool_ for TYPE_BOOL
    return value.item() if isinstance(value, np.generic) else value


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("the llm model streams: set model_transaction_policy { decoupled: true }")
        self.scheduler_config, self.engine_config = parse_knobs(parameters_from_json(config))
        folder = Path(args["model_repository"]) / args["model_version"]
        if not (folder / CONFIG_FILE).is_file():
            raise pb_utils.TritonModelException(f"no exported checkpoint in {folder}; run `make export`")
        started = time.monotonic()
        self.tokenizer = LlmTokenizer.from_folder(folder)
        executor = LlamaExecutor.from_checkpoint(folder, self.engine_config)
        self.max_model_len = executor.max_model_len
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.metrics = LlmMetrics(pb_utils, labels) if hasattr(pb_utils, "MetricFamily") else None
        self.loop = EngineLoop(executor, self.scheduler_config, self.tokenizer, observer=self.metrics)
        if self.metrics is not None:
            self.metrics.watch(self.loop.snapshot)
        self.loop.start()
        self._ids = itertools.count()
        pb_utils.Logger.log_info(
            f"llm: {folder} loaded in {time.monotonic() - started:.1f} s; {self.scheduler_config}; {self.engine_config}"
        )

    def execute(self, requests):
        for request in requests:
            self._submit(request, request.get_response_sender())
        return None

    def _submit(self, request, sender) -> None:
        arrival = time.monotonic()
        try:
            parameters = json.loads(request.parameters() or "{}")
            if control_request(parameters):
                self._control(parameters, sender)  # a ValueError from it is answered below
                return
            inputs = {name: _first(request, name) for name in ("text_input", *OPTIONAL_INPUTS)}
            parsed = parse_request(
                {key: value for key, value in inputs.items() if value is not None},
                max_tokens_limit=self.max_model_len - 1,
                request_parameters=request.parameters(),
            )
            prompt_ids = self.tokenizer.encode(parsed.prompt)
            check_fits(len(prompt_ids), parsed.params, self.max_model_len)
            generation = GenerationRequest(f"llm-{next(self._ids)}", prompt_ids, parsed.params, arrival)
            self.loop.submit(generation, self._responder(parsed, sender), is_cancelled=sender.is_cancelled)
        except QueueFullError as exc:
            sender.send(pb_utils.InferenceResponse(error=_error(f"server busy: {exc}", "UNAVAILABLE")), flags=FINAL)
        except (RequestError, ValueError) as exc:
            sender.send(pb_utils.InferenceResponse(error=_error(str(exc), "INVALID_ARG")), flags=FINAL)
        except Exception as exc:  # e.g. the loop is stopping: still exactly one final response
            sender.send(pb_utils.InferenceResponse(error=_error(f"cannot serve the request: {exc}", "INTERNAL")), flags=FINAL)

    def _control(self, parameters: dict, sender) -> None:
        """Apply a control request's step limits between steps; answer with the limits in force."""
        try:
            config = self.loop.update_config(**parse_control(parameters))
        except ControlRefused as exc:
            sender.send(pb_utils.InferenceResponse(error=_error(f"refused: {exc}", "INVALID_ARG")), flags=FINAL)
            return
        limits = {"max_num_batched_tokens": config.max_num_batched_tokens, "max_wait_ms": config.max_wait_ms}
        pb_utils.Logger.log_info(f"llm: live control set {limits}")
        text = np.array([json.dumps(limits).encode()], dtype=np.object_)
        sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", text)]), flags=FINAL)

    def _responder(self, parsed: ParsedRequest, sender):
        plan = ResponsePlan(parsed)

        def on_output(output: RequestOutput) -> None:
            for reply in plan.replies(output):
                sender.send(self._response(parsed, reply), flags=FINAL if reply.final else 0)

        return on_output

    @staticmethod
    def _response(parsed: ParsedRequest, reply: Reply):
        if reply.error is not None:
            code = "CANCELLED" if reply.cancelled else "UNAVAILABLE" if reply.overloaded else "INTERNAL"
            return pb_utils.InferenceResponse(error=_error(reply.error, code))
        tensors = [pb_utils.Tensor("text_output", np.array([reply.text.encode("utf-8")], dtype=np.object_))]
        if parsed.return_finish_reason:
            tensors.append(pb_utils.Tensor("finish_reason", np.array([str(reply.finish_reason).encode()], dtype=np.object_)))
        if parsed.return_num_input_tokens:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([reply.num_input_tokens], dtype=np.uint32)))
        if parsed.return_num_output_tokens:
            tensors.append(pb_utils.Tensor("num_output_tokens", np.array([reply.num_output_tokens], dtype=np.uint32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self) -> None:
        # logged on both sides: when an unload hangs, the log tells whether Triton got as far as
        # finalize (docs/llm.md, Known issues)
        started = time.monotonic()
        pb_utils.Logger.log_info("llm: finalize: stopping the engine loop")
        self.loop.stop(timeout_s=10)
        if self.metrics is not None:
            self.metrics.close()
        pb_utils.Logger.log_info(f"llm: finalized in {time.monotonic() - started:.1f} s")

"""The `llm` model's side of Triton's Python backend, shared by both engines' adapters: reading
a request's inputs, and turning a planned Reply (llm/serving/responses.py) or an error into an
InferenceResponse. `pb_utils` is injected, so nothing here imports Triton."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np

from llm.serving.request import RETURN_FLAGS, ParsedRequest, RequestError
from llm.serving.responses import Reply

INPUTS = ("text_input", "stream", "sampling_parameters", "exclude_input_in_output", *RETURN_FLAGS)


class TritonIO:
    def __init__(self, pb_utils: ModuleType) -> None:
        self.pb = pb_utils
        self.FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

    def inputs(self, request) -> dict[str, object]:
        """Input name -> the first element of its array (bytes for strings, bool for flags);
        absent or empty inputs left out (what llm.serving.request.parse_request takes)."""
        values = {}
        for name in INPUTS:
            tensor = self.pb.get_input_tensor_by_name(request, name)
            if tensor is None:
                continue
            array = tensor.as_numpy().reshape(-1)
            if array.size:
                value = array[0]
                values[name] = value.item() if isinstance(value, np.generic) else value
        return values

    def serve_each(self, requests, submit: Callable[[object, object], None], busy: tuple[type[Exception], ...]) -> None:
        """`submit(request, sender)` for each request; a refusal becomes the request's one final
        error response: `busy` ones UNAVAILABLE ("server busy"), bad input INVALID_ARG, anything
        else (e.g. the engine stopping) INTERNAL."""
        for request in requests:
            sender = request.get_response_sender()
            try:
                submit(request, sender)
            except busy as exc:
                self.send_error(sender, f"server busy: {exc}", "UNAVAILABLE")
            except (RequestError, ValueError) as exc:
                self.send_error(sender, str(exc), "INVALID_ARG")
            except Exception as exc:
                self.send_error(sender, f"cannot serve the request: {exc}", "INTERNAL")

    def error(self, message: str, code_name: str):
        """An error response; `code_name` of TritonError (INVALID_ARG, UNAVAILABLE, CANCELLED, INTERNAL)."""
        code = getattr(self.pb.TritonError, code_name, None)
        error = self.pb.TritonError(message) if code is None else self.pb.TritonError(message, code)
        return self.pb.InferenceResponse(error=error)

    def send_error(self, sender, message: str, code_name: str) -> None:
        sender.send(self.error(message, code_name), flags=self.FINAL)

    def reply(self, parsed: ParsedRequest, reply: Reply):
        if reply.error is not None:
            code = "CANCELLED" if reply.cancelled else "UNAVAILABLE" if reply.overloaded else "INTERNAL"
            return self.error(reply.error, code)
        tensor = self.pb.Tensor
        tensors = [tensor("text_output", np.array([reply.text.encode("utf-8")], dtype=np.object_))]
        if parsed.return_finish_reason:
            tensors.append(tensor("finish_reason", np.array([str(reply.finish_reason).encode()], dtype=np.object_)))
        if parsed.return_num_input_tokens:
            tensors.append(tensor("num_input_tokens", np.array([reply.num_input_tokens], dtype=np.uint32)))
        if parsed.return_num_output_tokens:
            tensors.append(tensor("num_output_tokens", np.array([reply.num_output_tokens], dtype=np.uint32)))
        return self.pb.InferenceResponse(output_tensors=tensors)

    def send_reply(self, sender, parsed: ParsedRequest, reply: Reply) -> None:
        sender.send(self.reply(parsed, reply), flags=self.FINAL if reply.final else 0)

"""Test-side clients of the `llm` model: one gRPC bidirectional stream collecting each
request's responses with their arrival times, and the HTTP generate endpoints."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient

from tools.triton_client import fetch_metrics

MODEL = "llm"
TIMEOUT_S = 600.0  # generous: the suite's machines differ 4x in speed and are shared


@dataclass
class Received:
    """What one request got back over the stream."""

    texts: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each response
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    error: str | None = None
    final_at: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def done(self) -> bool:
        return self.final_at is not None


def grpc_inputs(prompt: str | bytes, stream: bool = True, sampling: dict | str | bytes | None = None, **flags: bool) -> list:
    def tensor(name: str, value, datatype: str):
        item = grpcclient.InferInput(name, [1], datatype)
        item.set_data_from_numpy(np.array([value], dtype=np.object_ if datatype == "BYTES" else bool))
        return item

    raw = prompt if isinstance(prompt, bytes) else prompt.encode()
    inputs = [tensor("text_input", raw, "BYTES"), tensor("stream", stream, "BOOL")]
    if sampling is not None:
        text = json.dumps(sampling) if isinstance(sampling, dict) else sampling
        inputs.append(tensor("sampling_parameters", text if isinstance(text, bytes) else text.encode(), "BYTES"))
    inputs += [tensor(name, value, "BOOL") for name, value in flags.items()]
    return inputs


class LlmStream:
    """One gRPC stream; `send` returns the request's Received, filled in as responses arrive.
    Triton's stream callback carries no request id on errors, so errors go to the oldest
    open request sent with `expect_error=True` (tests send one such at a time per stream)."""

    def __init__(self, grpc_url: str) -> None:
        self.client = grpcclient.InferenceServerClient(grpc_url)
        self.requests: dict[str, Received] = {}
        self._errors: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._ids = iter(range(1_000_000))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.client.start_stream(callback=self._on_response)

    def send(self, inputs: list) -> tuple[str, Received]:
        request_id = f"t{next(self._ids)}"
        with self._lock:
            self.requests[request_id] = received = Received()
        self.client.async_stream_infer(MODEL, inputs, request_id=request_id, enable_empty_final_response=True)
        return request_id, received

    def _on_response(self, result, error) -> None:
        now = time.monotonic()
        with self._changed:
            if error is not None:
                self._errors.put(str(error))
            else:
                response = result.get_response()
                received = self.requests[response.id]
                text = result.as_numpy("text_output")
                if text is not None:
                    received.texts.append(b"".join(text.reshape(-1).tolist()).decode())
                    received.times.append(now)
                    received.outputs.append(
                        {o.name: result.as_numpy(o.name) for o in response.outputs if result.as_numpy(o.name) is not None}
                    )
                if response.parameters["triton_final_response"].bool_param:
                    received.final_at = now
            self._changed.notify_all()

    def wait(self, condition, timeout_s: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the llm stream did not answer in time")
                self._changed.wait(min(left, 1.0))

    def next_error(self, timeout_s: float = TIMEOUT_S) -> str:
        return self._errors.get(timeout=timeout_s)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def ask(grpc_url: str, inputs: list, timeout_s: float = TIMEOUT_S) -> Received:
    """One request on a stream of its own, so an error on the stream is surely this request's:
    its Received, with `error` set when the server answered with one (an error never sets
    `done`, so waiting for `done` alone would wait out the timeout)."""
    stream = LlmStream(grpc_url)
    try:
        _, received = stream.send(inputs)
        stream.wait(lambda: received.done or not stream._errors.empty(), timeout_s)
        if not received.done:
            received.error = stream.next_error(timeout_s=0)
    finally:
        stream.close(cancel=True)
    return received


def generate(http_url: str, body: dict, stream: bool = False, timeout_s: float = TIMEOUT_S) -> tuple[int, list[dict]]:
    """POST /generate (one JSON answer) or /generate_stream (server-sent events): the HTTP
    status and the JSON objects received."""
    endpoint = "generate_stream" if stream else "generate"
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/{MODEL}/{endpoint}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, payload = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read().decode()
    if not stream:
        return status, [json.loads(payload)]
    events = [line.removeprefix("data: ") for line in payload.splitlines() if line.startswith("data: ")]
    return status, [json.loads(event) for event in events]


def wait_until(condition, timeout_s: float = 120.0) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_for_metrics(server, condition, timeout_s: float = 120.0) -> list:
    """The server's metric samples once `condition(samples)` holds, or the last ones after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = fetch_metrics(server.options.metrics_url)
        if condition(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)

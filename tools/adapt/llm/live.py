"""The LLM controller against a running server: windows from its metrics, changes through the
live control request (llm/serving/control.py), never a reload.

Every `window_s` the controller differences the `llm` model's Prometheus histograms: TTFT
p99 from vllm:time_to_first_token_seconds, and the inter-token latency's p99 standing in for
TPOT p99 (the server has no per-request TPOT histogram; ITL p99 is its upper side), each the
upper bound of the bucket that holds the 99th percentile; the queue from the mean of the
vllm:num_requests_waiting gauge sampled every second. A change is one control request over a
gRPC stream; a refused or failed one keeps the last good setting and is logged.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import asdict

import numpy as np
import tritonclient.grpc as grpcclient

from tools.adapt.llm.control import LlmController, LlmDecision, LlmWindow
from tools.adapt.llm.windows import histogram_p99
from tools.contract import LLM_MODEL
from tools.triton_client import fetch_metrics

log = logging.getLogger("adapt.llm")

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
WAITING = "vllm:num_requests_waiting"
ANSWER_TIMEOUT_S = 60.0


class ControlChannel:
    """Control requests over one gRPC stream (the `llm` model is decoupled: streaming only)."""

    def __init__(self, grpc_url: str, key: str, model: str = LLM_MODEL) -> None:
        self.key, self.model = key, model
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self.client = grpcclient.InferenceServerClient(grpc_url)
        self.client.start_stream(callback=lambda result, error: self._answers.put((result, error)))
        self._ids = iter(range(10**9))

    def set(self, **limits: float) -> dict:
        """Apply the limits; the server's answer (the limits in force), or RuntimeError."""
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"-"], dtype=np.object_))
        parameters = {"llm_control": json.dumps(limits), "llm_control_key": self.key}
        self.client.async_stream_infer(self.model, [text], request_id=f"control-{next(self._ids)}", parameters=parameters)
        result, error = self._answers.get(timeout=ANSWER_TIMEOUT_S)
        if error is not None:
            raise RuntimeError(f"the control request failed: {error}")
        return json.loads(b"".join(result.as_numpy("text_output").reshape(-1).tolist()).decode())

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def _histogram(samples, family: str, model: str) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for name, labels, value in samples:
        if name == f"{family}_bucket" and labels.get("model", model) == model:
            bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


class MetricWindows:
    """Windows from the server's metrics: each `take` covers the time since the last one."""

    def __init__(self, metrics_url: str, model: str = LLM_MODEL) -> None:
        self.metrics_url, self.model = metrics_url, model
        self._waiting: list[float] = []
        self._last = self._histograms()

    def _histograms(self) -> tuple[dict, dict]:
        samples = fetch_metrics(self.metrics_url)
        return _histogram(samples, TTFT, self.model), _histogram(samples, ITL, self.model)

    def sample_queue(self) -> None:
        samples = fetch_metrics(self.metrics_url)
        self._waiting.append(sum(v for n, labels, v in samples if n == WAITING and labels.get("model", self.model) == self.model))

    def take(self) -> LlmWindow:
        now = self._histograms()
        ttft, samples = histogram_p99(self._last[0], now[0])
        itl, _ = histogram_p99(self._last[1], now[1])
        waiting = sum(self._waiting) / len(self._waiting) if self._waiting else 0.0
        self._last, self._waiting = now, []
        return LlmWindow(ttft, itl, waiting, samples)


def control_loop(
    controller: LlmController,
    channel: ControlChannel,
    windows: MetricWindows,
    window_s: float,
    stop: threading.Event,
    dry_run: bool = False,
) -> list[LlmDecision]:
    """Observe and act until `stop` is set; every decision logged and returned."""
    decisions: list[LlmDecision] = []
    started = time.monotonic()
    next_window = started + window_s
    while not stop.wait(1.0):
        windows.sample_queue()
        if time.monotonic() < next_window:
            continue
        next_window += window_s
        previous = controller.setting
        decision = controller.observe(windows.take(), time.monotonic() - started)
        decisions.append(decision)
        if decision.changed and not dry_run:
            try:
                channel.set(**asdict(decision.setting))
            except Exception as exc:  # keep the last good setting
                log.error("%s; the setting stays %s", exc, previous)
                controller.setting = previous
        level = logging.INFO if decision.changed else logging.DEBUG
        log.log(level, "%s -> %s: %s (%s)", previous, decision.setting, decision.reason, decision.window)
    return decisions

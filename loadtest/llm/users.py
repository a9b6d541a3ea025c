"""A locust user that streams from the LLM and reports what a chat user feels.

Each request is a POST to Triton's `/v2/models/<model>/generate_stream` (server-sent
events, one per token delta), read line by line as the events arrive; under locust's
gevent the standard library's HTTP client is cooperative. One request fires three kinds
of locust requests, named `<model>/<kind>` so the SLO verdict judges each kind apart:
  ttft  arrival of the first token (once per request that got one);
  itl   each gap between two consecutive tokens (as vLLM's inter-token histogram counts);
  e2e   the whole request: its failure, when it fails, is reported here only.
"""

from __future__ import annotations

import http.client
import json
import random
import time

from locust import User, task

from loadtest.corpus import TextSampler, load_corpus
from loadtest.llm.stream import locust_requests, token_times

_CORPUS = load_corpus()
# One chat turn in the served model's chat template (SmolLM2's is ChatML): a raw prompt
# often gets the end-of-sequence token at once from an instruct model, which is no load.
PROMPT = "<|im_start|>user\nSummarize in one sentence: {text}<|im_end|>\n<|im_start|>assistant\n"


class LlmStreamUser(User):
    """One chat user: a prompt from the corpus, a streamed answer, a think time."""

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.model = options.llm_model
        self.max_tokens = int(options.llm_max_tokens)
        self.prompt_length = options.llm_prompts
        self.client_timeout_s = float(options.client_timeout_s)
        self.mean_wait_s = float(options.wait_ms) / 1000.0
        self.sampler = TextSampler(_CORPUS, repeat_share=float(options.repeat_share), rng=random.Random())
        host, _, port = options.triton_http_url.rpartition(":")
        self.address = (host, int(port))

    def wait_time(self) -> float:
        """Exponential think time: each user's requests arrive as a Poisson process."""
        return random.expovariate(1.0 / self.mean_wait_s) if self.mean_wait_s > 0 else 0.0

    def body(self) -> bytes:
        (text,) = self.sampler.sample(self.prompt_length)
        sampling = {"max_tokens": self.max_tokens, "temperature": 0}
        # Without `stream` the model answers once at the end: no TTFT, no gaps to measure.
        body = {"text_input": PROMPT.format(text=text), "stream": True, "sampling_parameters": json.dumps(sampling)}
        return json.dumps(body).encode()

    @task
    def chat(self) -> None:
        connection = http.client.HTTPConnection(*self.address, timeout=self.client_timeout_s)
        times: list[float] = []
        error: str | None = None
        start = time.perf_counter()
        try:
            connection.request("POST", f"/v2/models/{self.model}/generate_stream", self.body(), {"Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status != 200:
                error = f"HTTP {response.status}: {response.read().decode('utf-8', 'replace')}"
            else:
                times, error = token_times(iter(response.readline, b""))
                if error is None and not times:
                    error = "the stream ended without a token"
        except Exception as exc:  # a network error is a failed request too, never a crashed user
            error = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()
        end = time.perf_counter()
        self.report(start, times, end, error)

    def report(self, start: float, times: list[float], end: float, error: str | None) -> None:
        for event in locust_requests(self.model, start, times, end, error):
            self.environment.events.request.fire(**event)

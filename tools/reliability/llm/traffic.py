"""The LLM soak's traffic: each kind of request, how it is sent, and the terminal outcome it got.

Three paths carry it: Triton's gRPC bidirectional stream, Triton's `/generate_stream` (SSE), and
the gateway's OpenAI streaming chat (`/v1/chat/completions`, SSE). Every request ends in exactly
one `Outcome`: answered (with its finish reason), refused with an error, rejected as overload
(429 / "server busy"), cancelled by its own client (a disconnect mid-stream), or `hung` when it
had no terminal outcome within the deadline (the client then gives up, and the soak fails).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass

from tools.load.llm.clients import GenerateStreamClient, HttpStreamSession, StreamClient, StreamError, TritonStreamClient, sse_events
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest

OK, ERROR, REJECTED, CANCELLED, HUNG = "ok", "error", "rejected", "cancelled", "hung"
OVERLOAD_WORDS = ("HTTP 429", "server busy", "max_waiting")  # the gateway's 429, the model's queue bound (UNAVAILABLE)


@dataclass(frozen=True)
class Kind:
    """One kind of request in the mix: its path, whether its client disconnects, and, for a bad
    one, the words its error must contain."""

    path: str  # grpc | generate_stream | openai_chat
    share: float  # of the steady load; 0: burst only
    disconnect: bool = False
    bad: str | None = None  # None: a good request

    @property
    def expected(self) -> tuple[str, ...]:
        """The outcomes that are correct for this kind (overload rejection is correct for every
        good request: the burst may fill the queue while it arrives)."""
        if self.bad is not None:
            return (ERROR,)
        return (CANCELLED, REJECTED) if self.disconnect else (OK, REJECTED)


KINDS = {
    "grpc": Kind("grpc", 0.24),
    "generate_stream": Kind("generate_stream", 0.20),
    "openai_chat": Kind("openai_chat", 0.24),
    "grpc_disconnect": Kind("grpc", 0.08, disconnect=True),
    "openai_disconnect": Kind("openai_chat", 0.08, disconnect=True),
    "bad_grpc_empty_prompt": Kind("grpc", 0.06, bad="text_input is empty"),
    "bad_generate_stream_max_tokens": Kind("generate_stream", 0.05, bad="max_tokens must be in [1,"),
    "bad_openai_no_messages": Kind("openai_chat", 0.05, bad="'messages' must not be empty"),
    "burst_grpc": Kind("grpc", 0.0),
    "burst_openai_chat": Kind("openai_chat", 0.0),
}

PROMPTS = (
    "What is dynamic batching, in one sentence?",
    "Describe a forest in the morning.",
    "Explain why a queue needs a bound.",
    "Write a short note about rivers.",
)


@dataclass
class Outcome:
    index: int
    kind: str
    sent_s: float  # on the soak's clock
    end_s: float
    outcome: str
    finish_reason: str | None = None  # of an answered request, as the client saw it
    tokens_out: int = 0
    message: str = ""

    @property
    def expected(self) -> bool:
        kind = KINDS[self.kind]
        if self.outcome == REJECTED and kind.path == "openai_chat":  # the gateway's 429 tells the client when to retry
            return REJECTED in kind.expected and "Retry-After" in self.message
        return self.outcome in kind.expected and (kind.bad is None or kind.bad in self.message)

    @property
    def latency_s(self) -> float:
        return self.end_s - self.sent_s


class ChatStreamClient(HttpStreamSession):
    """`POST /v1/chat/completions` with `stream: true` through the gateway (a new connection
    per request, so closing it is the gateway's signal that the client left)."""

    name = "OpenAI /v1/chat/completions, stream: true (aiohttp)"

    def __init__(self, base_url: str, model: str = "llm") -> None:
        super().__init__(base_url, "/v1/chat/completions", model)

    def body(self, request: LlmRequest) -> dict:
        messages = [{"role": "user", "content": request.prompt}] if request.prompt else []
        return {"model": self.model, "messages": messages, "stream": True, "max_tokens": request.max_tokens, "temperature": 0}

    async def generate(self, request: LlmRequest, record: StreamRecord, clock) -> None:
        if self._session is None:
            raise RuntimeError("open() the client first")
        async with self._session.post(self.url, json=self.body(request)) as response:
            if response.status != 200:
                retry = f" (Retry-After {response.headers['Retry-After']})" if "Retry-After" in response.headers else ""
                raise StreamError(f"HTTP {response.status}{retry}: {(await response.text())[:300]}")
            async for data in sse_events(response):
                if data == b"[DONE]":
                    record.end_s = clock()
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise StreamError(str(chunk["error"]))
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        record.add_tokens(clock(), 1)
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
        raise StreamError("the stream ended without [DONE]")


class Traffic:
    """The three clients, opened once; `send` runs one request of a kind to its terminal outcome."""

    def __init__(self, grpc_url: str, http_url: str, gateway_url: str, max_tokens: int, deadline_s: float, seed: int = 0) -> None:
        self.clients: dict[str, StreamClient] = {
            "grpc": TritonStreamClient(grpc_url),
            "generate_stream": GenerateStreamClient(http_url),
            "openai_chat": ChatStreamClient(gateway_url),
        }
        self.max_tokens, self.deadline_s = max_tokens, deadline_s
        self.random = random.Random(seed)
        self.started = time.perf_counter()

    async def open(self) -> None:
        for client in self.clients.values():
            await client.open()

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()

    def now(self) -> float:
        return time.perf_counter() - self.started

    def request(self, index: int, kind: Kind) -> LlmRequest:
        prompt = PROMPTS[index % len(PROMPTS)]
        if kind.bad in ("text_input is empty", "'messages' must not be empty"):
            prompt = ""
        max_tokens = 0 if kind.bad and "max_tokens" in kind.bad else self.max_tokens * (2 if kind.disconnect else 1)
        return LlmRequest(index, prompt, 0, max_tokens)

    async def send(self, index: int, name: str) -> Outcome:
        kind = KINDS[name]
        request = self.request(index, kind)
        record = StreamRecord(index, self.now())
        cut = self.random.randint(1, max(1, request.max_tokens // 3)) if kind.disconnect else None
        outcome = Outcome(index, name, record.sent_s, record.sent_s, OK)
        task = asyncio.ensure_future(self.clients[kind.path].generate(request, record, self.now))
        deadline = record.sent_s + self.deadline_s
        while not task.done():
            await asyncio.wait([task], timeout=0.01 if cut is not None else max(0.0, deadline - self.now()))
            if task.done():
                break
            if cut is not None and record.tokens_out >= cut:
                outcome.outcome = CANCELLED
            elif self.now() >= deadline:
                outcome.outcome, outcome.message = HUNG, f"no terminal outcome within {self.deadline_s:g} s"
            else:
                continue
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            break
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            message = str(error) or type(error).__name__
            outcome.outcome = REJECTED if any(words in message for words in OVERLOAD_WORDS) else ERROR
            outcome.message = message[:300]
        outcome.end_s, outcome.tokens_out = self.now(), record.tokens_out
        if outcome.outcome == OK:
            outcome.finish_reason = record.finish_reason
        return outcome

    def pick(self) -> str:
        steady = [(name, kind.share) for name, kind in KINDS.items() if kind.share > 0]
        return self.random.choices([n for n, _ in steady], weights=[s for _, s in steady])[0]

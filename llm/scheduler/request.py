"""One request's state inside the scheduler: its tokens, what the KV cache holds, its blocks.

`Request` and `RequestStatus` are vLLM's names (vllm/v1/request.py); what the client sent is
llm.contract.GenerationRequest, which a `Request` holds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum

from llm.contract import GenerationRequest
from llm.scheduler.block_manager import ROOT_HASH, BlockHash


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    """A request as the scheduler tracks it (a sequence of tokens and its KV blocks).

    Tokens are prompt + generated; after a preemption by recompute the KV cache is empty
    (`num_computed_tokens` = 0) and every known token is prefilled again, so the tokens so far
    are the new prompt without copying anything."""

    seq_id: int
    request: GenerationRequest
    token_ids: list[int]
    num_prompt_tokens: int
    num_computed_tokens: int = 0  # tokens whose KV is in this sequence's blocks
    block_table: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    first_scheduled: float | None = None
    block_hashes: list[BlockHash] = field(default_factory=list)  # chained hashes of full blocks (prefix caching)
    adapter_slot: int = -1  # the executor's LoRA slot of request.params.lora_name; -1: the base model

    @classmethod
    def from_request(cls, seq_id: int, request: GenerationRequest, adapter_slot: int = -1) -> Request:
        tokens = list(request.prompt_token_ids)
        return cls(seq_id=seq_id, request=request, token_ids=tokens, num_prompt_tokens=len(tokens), adapter_slot=adapter_slot)

    @property
    def hash_root(self) -> BlockHash:
        """The parent of its first block's hash: KV computed under one adapter never serves another."""
        name = self.request.params.lora_name
        return ROOT_HASH if name is None else hashlib.sha256(b"lora:" + name.encode()).digest()

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to feed: 1 for a decode, more for a (resumed) prefill."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        return self.num_uncomputed == 1 and self.num_computed_tokens > 0

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def queue_deadline(self) -> float | None:
        """When this request, never scheduled yet, stops waiting (`queue_timeout_ms`)."""
        timeout_ms = self.request.params.queue_timeout_ms
        return None if timeout_ms is None else self.request.arrival_time + timeout_ms / 1000.0

    @property
    def max_total_tokens(self) -> int:
        """Positions this sequence can occupy at most: prompt + max_tokens."""
        return self.num_prompt_tokens + self.request.params.max_tokens

"""Turn a step's chunks into the index tensors the forward needs, once per step.

The flat batch puts single-token chunks (decodes) first, sorted by context length and cut
into groups (`decode_groups`), so the forward runs each group's attention in one padded call
without padding a 40-token context to the 1,000 tokens of its longest neighbour (with the
paged kernel, which pads nothing, all decodes form one group); longer
chunks (prefills) follow, each with its own causal attention. Everything is built on the host
and moved to the device in one go per tensor, so the forward itself never syncs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llm.contract import ScheduledChunk


@dataclass(frozen=True)
class PrefillSpan:
    """A multi-token chunk: rows [lo, hi) of the flat batch, at positions start.. of its sequence."""

    lo: int
    hi: int
    start: int
    blocks: torch.Tensor | None  # the blocks holding positions [0, start + n) (None when start == 0: attend to the chunk itself)
    mask: torch.Tensor | None  # [n, kv_len] bool: key j visible to query i (None when start == 0: plain causal)
    kv_len: int


@dataclass(frozen=True)
class DecodeGroup:
    """Decode rows [lo, hi) whose attention runs in one call (padded SDPA or the paged kernel)."""

    lo: int
    hi: int
    blocks: torch.Tensor  # [(hi - lo) * width] block tables padded with block 0, flat (one index_select per layer)
    lengths: torch.Tensor  # [hi - lo] int64 context lengths (the paged kernel reads only these keys)
    mask: torch.Tensor | None  # [hi - lo, 1, 1, width * block_size] bool: key position < context length (None: paged)


GROUP_CALL_COST_TOKENS = 256  # a group's fixed cost (two gathers, one attention call per layer) in padded key tokens


def group_by_length(widths: Sequence[int], block_size: int, call_cost: int = GROUP_CALL_COST_TOKENS) -> list[tuple[int, int]]:
    """Cut ascending `widths` (blocks per sequence) into contiguous groups [lo, hi) that
    minimise the padded keys gathered plus `call_cost` per group: each group pads to its
    longest member. Exact dynamic programme over runs of equal width (splitting a run only adds
    a call), O(runs^2): a few dozen runs even when hundreds of sequences decode."""
    ends = [i + 1 for i in range(len(widths)) if i + 1 == len(widths) or widths[i + 1] != widths[i]]  # run ends
    best = [0.0] + [float("inf")] * len(ends)
    cut = [0] * (len(ends) + 1)
    for hi in range(1, len(ends) + 1):
        end = ends[hi - 1]
        for lo in range(hi):
            start = ends[lo - 1] if lo else 0
            cost = best[lo] + (end - start) * widths[end - 1] * block_size + call_cost
            if cost < best[hi]:
                best[hi], cut[hi] = cost, lo
    groups = []
    hi = len(ends)
    while hi > 0:
        lo = cut[hi]
        groups.append((ends[lo - 1] if lo else 0, ends[hi - 1]))
        hi = lo
    return groups[::-1]


@dataclass(frozen=True)
class StepPlan:
    """The executor's tensors for one step, built from what the scheduler decided
    (llm.scheduler.SchedulerOutput's chunks)."""

    token_ids: torch.Tensor  # [T] the flat batch, decodes first
    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T] where each token's K and V are written (block * block_size + offset)
    num_decode: int  # rows [0, num_decode) are single-token chunks, shortest context first
    decode_groups: tuple[DecodeGroup, ...]  # those rows, cut into padded attention calls
    prefills: tuple[PrefillSpan, ...]
    sample_rows: torch.Tensor  # [S] row of the last token of each sample=True chunk, in chunk order
    num_tokens: int
    kv_tokens_attended: int
    adapter_slots: torch.Tensor | None = None  # [T] int64 LoRA slot per row (-1: none); None when no row has one


def check_chunk(chunk: ScheduledChunk, block_size: int, num_blocks: int, max_model_len: int) -> None:
    """Refuse a chunk the cache cannot hold (ValueError naming the sequence)."""
    end = chunk.start_position + len(chunk.token_ids)
    if not chunk.token_ids:
        raise ValueError(f"sequence {chunk.seq_id}: a chunk with no tokens")
    if chunk.start_position < 0 or end > max_model_len:
        raise ValueError(f"sequence {chunk.seq_id}: positions [{chunk.start_position}, {end}) outside the context window {max_model_len}")
    needed = -(-end // block_size)
    if len(chunk.block_table) < needed:
        raise ValueError(f"sequence {chunk.seq_id}: {len(chunk.block_table)} blocks cannot hold {end} tokens (block size {block_size})")
    if any(not 0 <= block < num_blocks for block in chunk.block_table[:needed]):
        raise ValueError(f"sequence {chunk.seq_id}: block table {list(chunk.block_table[:needed])} outside [0, {num_blocks})")


def build_plan(
    chunks: Sequence[ScheduledChunk], block_size: int, num_blocks: int, max_model_len: int, device: torch.device, paged: bool = False
) -> StepPlan:
    """`paged`: all decodes in one group without a mask, for the paged kernel (llm.engine.attention),
    which reads only each sequence's own keys; else groups of similar length for padded SDPA."""
    if not chunks:
        raise ValueError("a step needs at least one chunk")
    for chunk in chunks:
        check_chunk(chunk, block_size, num_blocks, max_model_len)
    decodes = sorted((i for i, chunk in enumerate(chunks) if len(chunk.token_ids) == 1), key=lambda i: chunks[i].start_position)
    longer = [i for i, chunk in enumerate(chunks) if len(chunk.token_ids) > 1]

    token_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    last_row = [0] * len(chunks)
    for i in decodes:
        chunk = chunks[i]
        position = chunk.start_position
        last_row[i] = len(token_ids)
        token_ids.append(chunk.token_ids[0])
        positions.append(position)
        slots.append(chunk.block_table[position // block_size] * block_size + position % block_size)
    kv_tokens = sum(chunks[i].start_position + 1 for i in decodes)

    lengths = [chunks[i].start_position + 1 for i in decodes]
    widths = [-(-length // block_size) for length in lengths]
    decode_groups = []
    cuts = ([(0, len(decodes))] if decodes else []) if paged else group_by_length(widths, block_size, GROUP_CALL_COST_TOKENS)
    for lo, hi in cuts:
        width = max(widths[lo:hi])
        table = [list(chunks[i].block_table[:width]) + [0] * (width - len(chunks[i].block_table[:width])) for i in decodes[lo:hi]]
        group_lengths = torch.tensor(lengths[lo:hi], dtype=torch.long)
        mask = None
        if not paged:
            mask = ((torch.arange(width * block_size)[None, :] < group_lengths[:, None])[:, None, None, :]).to(device, non_blocking=True)
        blocks = torch.tensor(table, dtype=torch.long).view(-1)
        decode_groups.append(DecodeGroup(lo, hi, blocks.to(device, non_blocking=True), group_lengths.to(device, non_blocking=True), mask))

    spans: list[PrefillSpan] = []
    for i in longer:
        chunk = chunks[i]
        n, start = len(chunk.token_ids), chunk.start_position
        lo = len(token_ids)
        token_ids.extend(chunk.token_ids)
        chunk_positions = torch.arange(start, start + n)
        positions.extend(chunk_positions.tolist())
        end = start + n
        table = torch.tensor(list(chunk.block_table[: -(-end // block_size)]), dtype=torch.long)
        slots.extend((table[chunk_positions // block_size] * block_size + chunk_positions % block_size).tolist())
        blocks = mask = None
        if start > 0:
            blocks = table
            mask = torch.arange(end)[None, :] <= chunk_positions[:, None]
        spans.append(PrefillSpan(lo, lo + n, start, blocks, mask, end))
        last_row[i] = lo + n - 1
        kv_tokens += n * start + n * (n + 1) // 2

    def to_device(tensor: torch.Tensor | None) -> torch.Tensor | None:
        return None if tensor is None else tensor.to(device, non_blocking=True)

    spans = [PrefillSpan(s.lo, s.hi, s.start, to_device(s.blocks), to_device(s.mask), s.kv_len) for s in spans]
    sample_rows = [last_row[i] for i, chunk in enumerate(chunks) if chunk.sample]
    adapter_slots = None
    if any(chunk.adapter_slot >= 0 for chunk in chunks):
        per_row = [chunks[i].adapter_slot for i in decodes] + [chunks[i].adapter_slot for i in longer for _ in chunks[i].token_ids]
        adapter_slots = torch.tensor(per_row, dtype=torch.long, device=device)
    return StepPlan(
        token_ids=torch.tensor(token_ids, dtype=torch.long, device=device),
        positions=torch.tensor(positions, dtype=torch.long, device=device),
        slots=torch.tensor(slots, dtype=torch.long, device=device),
        num_decode=len(decodes),
        decode_groups=tuple(decode_groups),
        prefills=tuple(spans),
        sample_rows=torch.tensor(sample_rows, dtype=torch.long, device=device),
        num_tokens=len(token_ids),
        kv_tokens_attended=kv_tokens,
        adapter_slots=adapter_slots,
    )

"""The engine's logits equal transformers' LlamaForCausalLM on a tiny random model, whatever
the chunking, batching and block layout (the paged cache must be invisible in the output)."""

from __future__ import annotations

import pytest
import torch

from llm.contract import EngineConfig, ScheduledChunk
from llm.engine import LlamaExecutor, load_checkpoint, save_checkpoint
from llm.engine.checkpoint import fuse_hf_state_dict

transformers = pytest.importorskip("transformers")

from tests.unit.tiny_llama import tiny_executor, tiny_hf_llama  # noqa: E402

BLOCK = 4
ATOL = 1e-4


@pytest.fixture(scope="module")
def hf_model():
    return tiny_hf_llama()


def make_executor(hf_model, dtype: str = "float32", num_blocks: int = 64, attention: str = "auto") -> LlamaExecutor:
    from llm.engine.kernels.load import KernelUnavailable

    try:
        return tiny_executor(hf_model, num_blocks, BLOCK, dtype, attention=attention)
    except KernelUnavailable as error:  # attention="paged" on a machine without AVX2 or g++
        pytest.skip(str(error))


def hf_logits(hf_model, tokens: list[int]) -> torch.Tensor:
    """Next-token logits after every prefix of `tokens` [len, vocab]."""
    with torch.no_grad():
        return hf_model(torch.tensor([tokens])).logits[0].float()


def prompt(seed: int, length: int) -> list[int]:
    return torch.randint(3, 97, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_one_chunk_prefill_matches_transformers(hf_model):
    executor = make_executor(hf_model)
    tokens = prompt(1, 13)
    logits = executor.execute([ScheduledChunk(0, tokens, 0, [5, 6, 7, 8], True)])
    torch.testing.assert_close(logits[0], hf_logits(hf_model, tokens)[-1], atol=ATOL, rtol=0)


def test_torchs_row_operators_match_transformers_too(hf_model):
    """The fallback where our fused row kernels cannot run (llm.engine.row_ops)."""
    from llm.engine.row_ops import TorchRowOps

    executor = make_executor(hf_model, attention="padded")
    executor.model.rows = TorchRowOps(executor.model.dtype, executor.dims.rms_norm_eps)
    tokens = prompt(1, 13)
    executor.execute([ScheduledChunk(0, tokens[:-1], 0, [5, 6, 7, 8], False)])
    logits = executor.execute([ScheduledChunk(0, tokens[-1:], 12, [5, 6, 7, 8], True)])
    torch.testing.assert_close(logits[0], hf_logits(hf_model, tokens)[-1], atol=ATOL, rtol=0)


def test_prefill_in_chunks_over_scattered_blocks_matches_one_chunk(hf_model):
    executor = make_executor(hf_model)
    tokens = prompt(2, 23)  # block size 4 divides neither the chunks nor the length
    table = [17, 3, 40, 9, 0, 22]  # not contiguous, not ordered
    expected = hf_logits(hf_model, tokens)
    start = 0
    for size in (5, 7, 1, 10):
        chunk = tokens[start : start + size]
        last = start + size == len(tokens)
        logits = executor.execute([ScheduledChunk(0, chunk, start, table, last)])
        assert logits.shape[0] == (1 if last else 0)
        start += size
    torch.testing.assert_close(logits[0], expected[-1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("attention", ["paged", "padded"])
def test_mixed_step_of_decodes_and_prefills_matches_each_sequence_alone(hf_model, attention):
    """Three sequences of different lengths decode in one execute() while a fourth prefills
    its first chunk and a fifth its middle chunk (not sampled), with either decode attention."""
    executor = make_executor(hf_model, attention=attention)
    assert executor.config.attention == attention
    tables = {0: [1, 2, 3, 4, 5], 1: [30, 10, 20], 2: [6, 60, 7, 61, 8, 62, 9], 3: [11, 12, 13, 14], 4: [50, 51, 52, 53, 54]}
    lengths = {0: 9, 1: 2, 2: 21}
    histories = {seq: prompt(10 + seq, n) for seq, n in lengths.items()}
    for seq, tokens in histories.items():  # prefills, one step each
        executor.execute([ScheduledChunk(seq, tokens[:-1], 0, tables[seq], False)])
    long_prompt = prompt(20, 18)
    executor.execute([ScheduledChunk(4, long_prompt[:7], 0, tables[4], False)])
    fresh = prompt(30, 6)
    for _ in range(3):  # three decode steps; the first also runs two prefill chunks
        chunks = [ScheduledChunk(seq, tokens[-1:], len(tokens) - 1, tables[seq], True) for seq, tokens in histories.items()]
        if _ == 0:
            chunks.insert(1, ScheduledChunk(3, fresh, 0, tables[3], True))
            chunks.append(ScheduledChunk(4, long_prompt[7:15], 7, tables[4], False))
        logits = executor.execute(chunks)
        assert logits.shape == (len(chunks) - (1 if _ == 0 else 0), 97)
        order = [chunk.seq_id for chunk in chunks if chunk.sample]
        for row, seq in enumerate(order):
            tokens = fresh if seq == 3 else histories[seq]
            torch.testing.assert_close(logits[row], hf_logits(hf_model, tokens)[-1], atol=ATOL, rtol=0, msg=f"sequence {seq}")
        for seq, tokens in histories.items():
            tokens.append(int(logits[order.index(seq)].argmax()))
    logits = executor.execute([ScheduledChunk(4, long_prompt[15:], 15, tables[4], True)])
    torch.testing.assert_close(logits[0], hf_logits(hf_model, long_prompt)[-1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("attention", ["paged", "padded"])
def test_bfloat16_keeps_the_greedy_token(hf_model, attention):
    executor = make_executor(hf_model, dtype="bfloat16", attention=attention)
    tokens = prompt(3, 11)
    logits = executor.execute([ScheduledChunk(0, tokens[:-1], 0, [0, 1, 2], False)])
    logits = executor.execute([ScheduledChunk(0, tokens[-1:], len(tokens) - 1, [0, 1, 2], True)])  # a decode step
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits[0], hf_logits(hf_model, tokens)[-1], atol=0.1, rtol=0)


def test_checkpoint_round_trip_gives_the_same_logits(hf_model, tmp_path):
    executor = make_executor(hf_model)
    save_checkpoint(tmp_path, executor.dims, fuse_hf_state_dict(hf_model.state_dict(), executor.dims))
    dims, _ = load_checkpoint(tmp_path)
    assert dims == executor.dims and dims.eos_token_ids == (2,)
    loaded = LlamaExecutor.from_checkpoint(tmp_path, EngineConfig(block_size=BLOCK, kv_cache_bytes=2**20, max_model_len=128))
    tokens = prompt(4, 9)
    chunk = [ScheduledChunk(0, tokens, 0, [0, 1, 2], True)]
    torch.testing.assert_close(loaded.execute(chunk), executor.execute(chunk), atol=0, rtol=0)
    assert loaded.eos_token_ids == frozenset({2})


def test_kv_cache_is_sized_from_the_byte_budget(hf_model):
    executor = make_executor(hf_model, num_blocks=37)
    assert executor.num_blocks == 37
    assert executor.cache.k.shape == (2, 37, BLOCK, 2, 8)


@pytest.mark.parametrize(
    "chunk, problem",
    [
        (ScheduledChunk(0, [5] * 9, 0, [0, 1], True), "cannot hold"),
        (ScheduledChunk(0, [5], 200, list(range(60)), True), "context window"),
        (ScheduledChunk(0, [5, 6], 0, [999], True), "outside"),
        (ScheduledChunk(0, [], 0, [0], True), "no tokens"),
    ],
)
def test_a_chunk_the_cache_cannot_hold_is_refused_with_the_reason(hf_model, chunk, problem):
    with pytest.raises(ValueError, match=problem):
        make_executor(hf_model).execute([chunk])


def test_decodes_of_very_different_lengths_run_in_length_groups_and_match_each_sequence_alone(hf_model, monkeypatch):
    """Short and long contexts decode in separate padded attention calls (a cheap call cost
    makes the split worth it at this tiny size); each still equals transformers alone."""
    from llm.engine import step_plan

    monkeypatch.setattr(step_plan, "GROUP_CALL_COST_TOKENS", 16)
    executor = make_executor(hf_model, num_blocks=80, attention="padded")
    lengths = {0: 100, 1: 3, 2: 90, 3: 5}
    tables, histories, next_block = {}, {}, 1
    for seq, n in lengths.items():
        width = -(-(n + 1) // BLOCK)
        tables[seq] = list(range(next_block, next_block + width))[::-1]  # scattered, descending
        next_block += width
        histories[seq] = prompt(40 + seq, n)
        executor.execute([ScheduledChunk(seq, histories[seq][:-1], 0, tables[seq], False)])
    chunks = [ScheduledChunk(seq, tokens[-1:], len(tokens) - 1, tables[seq], True) for seq, tokens in histories.items()]
    plan = step_plan.build_plan(chunks, BLOCK, executor.num_blocks, executor.max_model_len, executor.device)
    assert [(group.lo, group.hi) for group in plan.decode_groups] == [(0, 2), (2, 4)]  # shortest first: {3, 5}, {90, 100}
    logits = executor.execute(chunks)
    for row, (seq, tokens) in enumerate(histories.items()):
        torch.testing.assert_close(logits[row], hf_logits(hf_model, tokens)[-1], atol=ATOL, rtol=0, msg=f"sequence {seq}")


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_on_our_amx_products_a_sequence_gets_the_same_logits_alone_and_beside_others(batch_invariant):
    """Every layer on the AMX kernel (widths that are multiples of 16 and 32), paged attention
    and the fused row operators all compute each row alone: a decode's logits keep their bits
    when other sequences decode and prefill in its step, with or without batch_invariant."""
    from llm.engine.linear import amx_unavailable

    why = amx_unavailable(torch.device("cpu"))
    if why is not None:
        pytest.skip(f"our AMX product cannot run here: {why}")
    model = tiny_hf_llama(num_heads=8, intermediate_size=96, vocab_size=112)
    executor = tiny_executor(model, 64, BLOCK, "bfloat16", attention="paged", dense_kernel="amx", batch_invariant=batch_invariant)
    assert executor.config.dense_kernel == "amx"
    assert all(layer.qkv.amx_packed is not None and layer.down.amx_packed is not None for layer in executor.model.layers)
    assert executor.model.lm_head.amx_packed is not None
    tokens = prompt(5, 10)
    executor.execute([ScheduledChunk(0, tokens[:-1], 0, [0, 1, 2], False)])
    alone = executor.execute([ScheduledChunk(0, tokens[-1:], len(tokens) - 1, [0, 1, 2], True)])
    others = {seq: prompt(40 + seq, 3 + 2 * seq) for seq in range(1, 6)}
    for seq, history in others.items():
        executor.execute([ScheduledChunk(seq, history[:-1], 0, list(range(4 * seq, 4 * seq + 4)), False)])
    crowd = [ScheduledChunk(seq, h[-1:], len(h) - 1, list(range(4 * seq, 4 * seq + 4)), True) for seq, h in others.items()]
    crowd.insert(2, ScheduledChunk(0, tokens[-1:], len(tokens) - 1, [0, 1, 2], True))
    crowd.append(ScheduledChunk(9, prompt(50, 37), 0, list(range(40, 50)), True))  # a prompt beside them
    beside = executor.execute(crowd)
    assert torch.equal(beside[2], alone[0])
    torch.testing.assert_close(alone[0], hf_logits(model, tokens)[-1], atol=0.1, rtol=0)

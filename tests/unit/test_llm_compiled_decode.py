"""The compiled decode step (`compile_decode`) gives the eager forward's logits and KV cache,
for one and for many sequences, short and long contexts, sampled and unsampled rows, without
compiling again after the load's warm-up."""

from __future__ import annotations

import pytest
import torch

from llm.contract import ScheduledChunk

transformers = pytest.importorskip("transformers")

from tests.unit.tiny_llama import tiny_executor, tiny_hf_llama  # noqa: E402

BLOCK = 4


@pytest.fixture(scope="module")
def executors():
    # 3 KV heads, as SmolLM2-135M: equal to the warm-up's block count, which is where a dynamic
    # cache dimension once tied the graph to 3-block steps
    hf_model = tiny_hf_llama(num_kv_heads=3)
    return tiny_executor(hf_model, 64, BLOCK), tiny_executor(hf_model, 64, BLOCK, compile_decode=True)


def tokens(seed: int, length: int) -> list[int]:
    return torch.randint(3, 97, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefill(executors, tables: dict[int, list[int]], histories: dict[int, list[int]]) -> None:
    for executor in executors:
        for seq, history in histories.items():
            executor.execute([ScheduledChunk(seq, history[:-1], 0, tables[seq], False)])


def test_compiled_decode_steps_match_the_eager_forward(executors):
    eager, compiled = executors
    assert compiled.compiled_decode is not None and eager.compiled_decode is None
    tables = {0: [1, 2, 3, 4, 5, 6], 1: [30, 10], 2: [7, 60, 8, 61, 9, 62, 11, 63], 3: [20, 21, 22]}
    histories = {0: tokens(1, 9), 1: tokens(2, 2), 2: tokens(3, 21), 3: tokens(4, 5)}  # 1 block (padded to 3) .. 6 blocks
    prefill(executors, tables, histories)
    for step, seqs in enumerate(([0, 1, 2, 3], [2], [3, 0], [1, 2, 0])):  # one sequence, several, in any order
        chunks = [ScheduledChunk(seq, histories[seq][-1:], len(histories[seq]) - 1, tables[seq], seq != 0) for seq in seqs]
        expected = eager.execute(chunks)
        with torch._dynamo.config.patch(error_on_recompile=True):  # the load's warm-up covers every step
            got = compiled.execute(chunks)
        assert got.shape == expected.shape == (sum(seq != 0 for seq in seqs), 97)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        assert compiled.last_kv_tokens_attended == eager.last_kv_tokens_attended
        for seq in seqs:
            histories[seq].append(int(expected[0].argmax()) if step % 2 else 5 + seq)
    # block 0 holds the load's warm-up token (no sequence here owns it): every other block is equal
    torch.testing.assert_close(compiled.cache.k[:, 1:], eager.cache.k[:, 1:], atol=1e-5, rtol=0)
    torch.testing.assert_close(compiled.cache.v[:, 1:], eager.cache.v[:, 1:], atol=1e-5, rtol=0)


def test_compiled_decode_refuses_a_block_table_too_short(executors):
    _, compiled = executors
    with pytest.raises(ValueError, match="sequence 7: 1 blocks cannot hold"):
        compiled.execute([ScheduledChunk(7, [5], 8, [3], True)])


def test_files_read_as_utf8_after_use_utf8_files_even_from_the_c_locale() -> None:
    """The Python backend's stub runs in the "C" locale, where inductor's templates failed to load."""
    import locale

    from llm.engine.compiled_decode import use_utf8_files

    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        assert locale.getpreferredencoding(False).lower().replace("-", "") != "utf8"  # the stub's situation
        use_utf8_files()
        assert locale.getpreferredencoding(False).lower().replace("-", "") == "utf8"
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)

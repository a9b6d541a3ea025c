"""The paged decode-attention kernel (llm/engine/kernels/paged_attention.cpp) against torch's
SDPA over the same keys gathered by hand, its batch invariance, its refusals, and how the
`attention` knob resolves. The kernel is compiled here on first use (~30 s, then cached).
Each check runs on both of its codes: the CPU's own (AVX512-BF16 for bfloat16 where the CPU
has it) and the AVX2 one every machine of the pool runs (LLM_ATTENTION_ISA=avx2)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from llm.engine import attention
from llm.engine.attention import paged_kernel, resolve_attention
from llm.engine.kernels.load import KernelUnavailable

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 16  # SmolLM2-135M's attention shape


@pytest.fixture(scope="module")
def kernel():
    try:
        return paged_kernel(torch.device("cpu"), torch.float32, HEAD_DIM)
    except KernelUnavailable as error:  # a machine without AVX2 or g++: the padded path is tested elsewhere
        pytest.skip(str(error))


@pytest.fixture(params=["cpu's own", "avx2"], autouse=True)
def isa(request, monkeypatch) -> str:
    """Which of the kernel's codes runs: the CPU's best, or AVX2 forced."""
    if request.param == "avx2":
        monkeypatch.setenv("LLM_ATTENTION_ISA", "avx2")
    else:
        monkeypatch.delenv("LLM_ATTENTION_ISA", raising=False)
    return request.param


def paged_case(lengths: list[int], dtype: torch.dtype, seed: int = 0, num_blocks: int = 200, head_dim: int = HEAD_DIM):
    """Random caches, block tables scattered over them, one query row per sequence."""
    generator = torch.Generator().manual_seed(seed)
    key_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, head_dim, generator=generator).to(dtype)
    value_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, head_dim, generator=generator).to(dtype)
    width = max(-(-n // BLOCK) for n in lengths)
    order = torch.randperm(num_blocks, generator=generator)
    tables = torch.zeros(len(lengths), width, dtype=torch.long)
    used = 0
    for row, n in enumerate(lengths):
        blocks = -(-n // BLOCK)
        tables[row, :blocks] = order[used : used + blocks]
        used += blocks
    query = torch.randn(len(lengths), HEADS, head_dim, generator=generator).to(dtype)
    return query, key_cache, value_cache, tables, torch.tensor(lengths, dtype=torch.long)


def reference(query, key_cache, value_cache, tables, lengths) -> torch.Tensor:
    """float32 SDPA, one sequence at a time over its own keys."""
    out, head_dim = [], query.shape[-1]
    for row, n in enumerate(lengths.tolist()):
        keys = key_cache[tables[row]].reshape(-1, KV_HEADS, head_dim)[:n].float().transpose(0, 1)
        values = value_cache[tables[row]].reshape(-1, KV_HEADS, head_dim)[:n].float().transpose(0, 1)
        q = query[row].float().view(KV_HEADS, HEADS // KV_HEADS, head_dim)
        out.append(F.scaled_dot_product_attention(q, keys, values).reshape(HEADS, head_dim))
    return torch.stack(out)


def run(kernel, query, key_cache, value_cache, tables, lengths) -> torch.Tensor:
    out = torch.empty(query.shape, dtype=key_cache.dtype)
    kernel(query, key_cache, value_cache, tables, lengths, query.shape[-1] ** -0.5, out)
    return out


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("head_dim", [64, 128, 96, 80])  # unrolled x2, run-time sizes (80: AVX2 only)
def test_the_kernel_equals_sdpa_over_each_sequences_own_keys(kernel, dtype, tolerance, head_dim):
    lengths = [1, 3, 15, 16, 17, 35, 200, 333]  # one key, a block's edge either side, several blocks
    case = paged_case(lengths, dtype, head_dim=head_dim)
    out = run(kernel, *case)
    torch.testing.assert_close(out.float(), reference(*case), atol=tolerance, rtol=0)


def test_large_scores_do_not_overflow_the_running_softmax(kernel):
    """Keys scaled so the scores reach hundreds: the one-pass softmax rescales, never overflows."""
    query, key_cache, value_cache, tables, lengths = paged_case([300, 45], torch.float32)
    case = (query * 30, key_cache * 30, value_cache, tables, lengths)
    out = run(kernel, *case)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, reference(*case), atol=1e-4, rtol=0)


def test_a_query_row_wider_than_its_heads_is_read_in_place(kernel):
    """The forward hands the kernel q as a view of the fused rotary output (query and key heads
    side by side), not a contiguous copy."""
    query, key_cache, value_cache, tables, lengths = paged_case([40, 70], torch.float32)
    fused = torch.cat([query, torch.randn(2, KV_HEADS, HEAD_DIM)], dim=1)
    view = fused[:, :HEADS]
    assert not view.is_contiguous()
    torch.testing.assert_close(
        run(kernel, view, key_cache, value_cache, tables, lengths),
        run(kernel, query, key_cache, value_cache, tables, lengths),
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sequence_gets_the_same_bits_alone_and_beside_others(kernel, dtype):
    query, key_cache, value_cache, tables, lengths = paged_case([50, 300, 7, 120], dtype)
    together = run(kernel, query, key_cache, value_cache, tables, lengths)
    for row in range(len(lengths)):
        alone = run(kernel, query[row : row + 1], key_cache, value_cache, tables[row : row + 1], lengths[row : row + 1])
        assert torch.equal(alone[0], together[row]), f"sequence {row} changed beside the others"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda case: (*case[:4], torch.tensor([0, 20])), "context length 0"),
        (lambda case: (*case[:4], torch.tensor([5, 10000])), "context length 10000"),
        (lambda case: (case[0].double(), *case[1:]), "one dtype"),
        (lambda case: (*case[:3], case[3].int(), *case[4:]), "int64"),
        (lambda case: (case[0][:1], *case[1:]), "one block table row"),
        (lambda case: (*[tensor[..., :60].contiguous() for tensor in case[:3]], *case[3:]), "multiple of 8"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(kernel, change, problem):
    case = change(paged_case([5, 20], torch.float32))
    with pytest.raises(RuntimeError, match=problem):
        kernel(*case[:5], HEAD_DIM**-0.5, torch.empty(case[0].shape, dtype=case[1].dtype))


def test_the_knob_resolves_to_what_can_run(kernel, caplog):
    cpu = torch.device("cpu")
    assert resolve_attention("padded", cpu, torch.float32, HEAD_DIM) == ("padded", None)
    assert resolve_attention("paged", cpu, torch.bfloat16, HEAD_DIM) == ("paged", kernel)
    assert resolve_attention("auto", cpu, torch.float32, HEAD_DIM) == ("paged", kernel)
    with caplog.at_level(logging.WARNING, logger=attention.__name__):
        assert resolve_attention("auto", cpu, torch.float16, HEAD_DIM) == ("padded", None)
        assert resolve_attention("auto", cpu, torch.float32, 60) == ("padded", None)
    assert "float16" in caplog.text and "not 60" in caplog.text
    with pytest.raises(KernelUnavailable, match="CPU"):
        resolve_attention("paged", torch.device("cuda"), torch.bfloat16, HEAD_DIM)
    with pytest.raises(ValueError, match="'flash'"):
        resolve_attention("flash", cpu, torch.float32, HEAD_DIM)


@pytest.mark.parametrize("group", [1, 7])  # query heads per KV head: one, and more than a register tile holds
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_query_head_of_a_wide_group_is_attended(kernel, group, head_dim, dtype):
    """The value sums run in tiles of a few heads (llm/engine/kernels/paged_attention.cpp): a group
    that is not a multiple of the tile, or a single head, must still match SDPA head by head."""
    kv_heads, lengths = 2, [5, 90, 33]
    generator = torch.Generator().manual_seed(group)
    key_cache = torch.randn(40, BLOCK, kv_heads, head_dim, generator=generator).to(dtype)
    value_cache = torch.randn(40, BLOCK, kv_heads, head_dim, generator=generator).to(dtype)
    tables = torch.randperm(40, generator=generator)[:21].view(3, 7).contiguous()
    query = torch.randn(len(lengths), kv_heads * group, head_dim, generator=generator).to(dtype)
    out = run(kernel, query, key_cache, value_cache, tables, torch.tensor(lengths))
    for row, n in enumerate(lengths):
        keys = key_cache[tables[row]].reshape(-1, kv_heads, head_dim)[:n].float().transpose(0, 1)
        values = value_cache[tables[row]].reshape(-1, kv_heads, head_dim)[:n].float().transpose(0, 1)
        q = query[row].float().view(kv_heads, group, head_dim)
        expected = F.scaled_dot_product_attention(q, keys, values).reshape(kv_heads * group, head_dim)
        torch.testing.assert_close(out[row].float(), expected, atol=1e-5 if dtype == torch.float32 else 2e-2, rtol=0)

"""The fused row operators (llm/engine/kernels/row_ops.cpp) against torch's, row invariance,
refusals, and the fallback to torch's where the library cannot run."""

from __future__ import annotations

import pytest
import torch

from llm.engine.kernels.load import KernelUnavailable
from llm.engine.row_ops import FusedRowOps, TorchRowOps, row_ops_for

EPS = 1e-5
HIDDEN, INTERMEDIATE = 576, 1536  # SmolLM2-135M's widths


@pytest.fixture(scope="module")
def fused_float32():
    ops = row_ops_for(torch.device("cpu"), torch.float32, EPS)
    if not isinstance(ops, FusedRowOps):
        pytest.skip("the row_ops library cannot run on this machine")
    return ops


def rows(n: int, width: int = HIDDEN, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_fused_norms_equal_torchs(fused_float32, dtype, tolerance):
    fused, reference = FusedRowOps(dtype, EPS), TorchRowOps(dtype, EPS)
    x, weight, delta = rows(7), rows(1)[0].abs() + 0.5, rows(7, seed=1).to(dtype)
    assert fused.norm(x, weight).dtype == dtype
    torch.testing.assert_close(fused.norm(x, weight).float(), reference.norm(x, weight).float(), atol=tolerance, rtol=tolerance)
    x_fused, x_torch = x.clone(), x.clone()
    out_fused, out_torch = fused.add_norm(x_fused, delta, weight), reference.add_norm(x_torch, delta, weight)
    torch.testing.assert_close(x_fused, x_torch, atol=0, rtol=0)  # the residual is updated in place, exactly
    torch.testing.assert_close(out_fused.float(), out_torch.float(), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_fused_silu_mul_equals_torchs(fused_float32, dtype, tolerance):
    gate_up = rows(5, 2 * INTERMEDIATE).to(dtype)
    fused, reference = FusedRowOps(dtype, EPS).silu_mul(gate_up), TorchRowOps(dtype, EPS).silu_mul(gate_up)
    assert fused.shape == (5, INTERMEDIATE) and fused.dtype == dtype
    torch.testing.assert_close(fused.float(), reference.float(), atol=tolerance, rtol=tolerance)


def test_a_row_gets_the_same_bits_alone_and_among_others(fused_float32):
    ops = FusedRowOps(torch.bfloat16, EPS)
    x, weight = rows(40), rows(1)[0]
    together = ops.norm(x, weight)
    for row in (0, 17, 39):
        assert torch.equal(ops.norm(x[row : row + 1], weight)[0], together[row])


def test_bad_arguments_are_refused_with_the_reason(fused_float32):
    kernels = torch.ops.llm_kernels
    with pytest.raises(RuntimeError, match="x must be contiguous float32"):
        kernels.rms_norm(rows(2).double(), torch.ones(HIDDEN), EPS, torch.empty(2, HIDDEN))
    with pytest.raises(RuntimeError, match="weight must be"):
        kernels.rms_norm(rows(2), torch.ones(HIDDEN + 1), EPS, torch.empty(2, HIDDEN))
    with pytest.raises(RuntimeError, match="delta must be"):
        kernels.add_rms_norm(rows(2), rows(3), torch.ones(HIDDEN), EPS, torch.empty(2, HIDDEN))
    with pytest.raises(RuntimeError, match="gate_up must be"):
        kernels.silu_mul(rows(2, 7), torch.empty(2, 3))


def test_torchs_operators_serve_where_the_library_cannot_run(monkeypatch, fused_float32):
    assert isinstance(row_ops_for(torch.device("cpu"), torch.float16, EPS), TorchRowOps)  # no fused float16
    assert isinstance(row_ops_for(torch.device("cpu"), torch.float32, EPS, fused=False), TorchRowOps)

    def unavailable(name, device):
        raise KernelUnavailable("no compiler")

    monkeypatch.setattr("llm.engine.row_ops.load_kernels", unavailable)
    assert isinstance(row_ops_for(torch.device("cpu"), torch.float32, EPS), TorchRowOps)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_the_fused_rotary_writes_the_same_keys_values_and_queries_as_torchs(fused_float32, dtype, tolerance):
    from llm.engine.model import rope_tables

    heads, kv_heads, head_dim, slots = 9, 3, 64, 40
    dims = type("Dims", (), {"head_dim": head_dim, "rope_theta": 100000.0})()
    cos, sin = (table.to(dtype) for table in rope_tables(dims, 300, torch.device("cpu")))
    qkv = rows(5, (heads + 2 * kv_heads) * head_dim).to(dtype)
    positions, where = torch.tensor([0, 7, 299, 31, 32]), torch.tensor([3, 39, 0, 17, 8])
    results = []
    for ops in (FusedRowOps(dtype, EPS), TorchRowOps(dtype, EPS)):
        k_cache, v_cache = torch.zeros(slots, kv_heads, head_dim, dtype=dtype), torch.zeros(slots, kv_heads, head_dim, dtype=dtype)
        qk = ops.rotary_and_cache(qkv, positions, cos, sin, where, k_cache, v_cache, heads + kv_heads)
        results.append((qk.float(), k_cache.float(), v_cache.float()))
    (qk, k, v), (qk_ref, k_ref, v_ref) = results
    torch.testing.assert_close(qk, qk_ref, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(k, k_ref, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(v, v_ref, atol=0, rtol=0)  # values are copied, not computed
    assert k[where].abs().sum() > 0 and k[[i for i in range(slots) if i not in where.tolist()]].abs().sum() == 0


def test_the_fused_rotary_refuses_a_slot_outside_the_cache(fused_float32):
    qkv = rows(1, 15 * 64)
    with pytest.raises(RuntimeError, match="slot 99 outside the cache"):
        torch.ops.llm_kernels.rotary_cache_write(
            qkv, torch.tensor([0]), torch.ones(4, 64), torch.ones(4, 64), torch.tensor([99]),
            torch.zeros(8, 3, 64), torch.zeros(8, 3, 64), torch.empty(1, 12, 64),
        )  # fmt: skip

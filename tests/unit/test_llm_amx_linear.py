"""Our AMX product of bfloat16 rows and a packed weight (llm/engine/kernels/amx_linear.cpp):
the matmul's values, every row's bits independent of the rows beside it, clear refusals, and
the dense_kernel knob's resolution. Skipped where the CPU has no AMX."""

from __future__ import annotations

import pytest
import torch

from llm.engine.kernels.load import KernelUnavailable
from llm.engine.linear import DenseLinear, amx_unavailable, resolve_dense_kernel

CPU = torch.device("cpu")
WHY = amx_unavailable(CPU)
needs_amx = pytest.mark.skipif(WHY is not None, reason=f"our AMX product cannot run here: {WHY}")


def bf16(*shape: int, seed: int = 0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) / 8).to(torch.bfloat16)


@needs_amx
@pytest.mark.parametrize("rows", [1, 3, 16, 17, 40, 256])
@pytest.mark.parametrize(("out_features", "in_features"), [(48, 64), (960, 576), (576, 1536)])
def test_the_product_equals_the_float32_matmul_of_its_inputs(rows, out_features, in_features):
    """float32 sums of exact bfloat16 products, rounded once: within bfloat16's rounding."""
    weight, x = bf16(out_features, in_features, seed=1), bf16(rows, in_features, seed=2)
    out = torch.ops.llm_kernels.amx_linear(x, torch.ops.llm_kernels.amx_pack(weight))
    assert out.shape == (rows, out_features) and out.dtype == torch.bfloat16
    expected = x.float() @ weight.float().T
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


@needs_amx
def test_a_row_gets_the_same_bits_alone_and_in_any_batch():
    """Tiles never mix rows, and every row sums K in one order: a seeded request's tokens cannot
    depend on what shares its step, at any row count (oneDNN's needed padded blocks of 32)."""
    weight, x = bf16(576, 1536, seed=3), bf16(300, 1536, seed=4) * 4
    packed = torch.ops.llm_kernels.amx_pack(weight)
    alone = torch.cat([torch.ops.llm_kernels.amx_linear(x[i : i + 1], packed) for i in range(0, 300, 7)])
    for rows in (2, 15, 16, 17, 31, 32, 33, 48, 100, 300):
        together = torch.ops.llm_kernels.amx_linear(x[:rows], packed)
        picked = list(range(0, rows, 7))
        assert torch.equal(together[picked], alone[: len(picked)]), f"a row changed in a batch of {rows}"


@needs_amx
def test_rows_of_a_wider_tensor_are_read_in_place():
    """A step's rows may be a column slice of a wider tensor (row stride > K)."""
    weight, wide = bf16(64, 96, seed=5), bf16(9, 160, seed=6)
    packed = torch.ops.llm_kernels.amx_pack(weight)
    view = wide[:, 32:128]
    assert not view.is_contiguous()
    assert torch.equal(torch.ops.llm_kernels.amx_linear(view, packed), torch.ops.llm_kernels.amx_linear(view.contiguous(), packed))


@needs_amx
def test_bad_shapes_and_dtypes_are_refused_by_name():
    with pytest.raises(RuntimeError, match="multiple of 16"):
        torch.ops.llm_kernels.amx_pack(bf16(97, 64))
    with pytest.raises(RuntimeError, match="of 32"):
        torch.ops.llm_kernels.amx_pack(bf16(96, 48))
    with pytest.raises(RuntimeError, match="bfloat16"):
        torch.ops.llm_kernels.amx_pack(torch.zeros(16, 32))
    packed = torch.ops.llm_kernels.amx_pack(bf16(16, 64))
    with pytest.raises(RuntimeError, match="x has 32 columns, the weight 64"):
        torch.ops.llm_kernels.amx_linear(bf16(2, 32), packed)
    with pytest.raises(RuntimeError, match="bfloat16"):
        torch.ops.llm_kernels.amx_linear(torch.zeros(2, 64), packed)


@needs_amx
def test_dense_linear_packs_for_amx_only_where_the_shape_fits():
    fits = DenseLinear(bf16(96, 64), torch.bfloat16, CPU, amx=True)
    assert fits.amx_packed is not None and fits.packed is None and fits.weight is None  # one copy of the weight
    odd = DenseLinear(bf16(97, 64), torch.bfloat16, CPU, amx=True)  # a vocabulary of 97: oneDNN's
    assert odd.amx_packed is None and odd.packed is not None
    x = bf16(5, 64, seed=7)
    torch.testing.assert_close(fits(x), DenseLinear(bf16(96, 64), torch.bfloat16, CPU)(x), atol=1e-2, rtol=1e-2)


def test_the_knob_resolves_to_what_can_run():
    assert resolve_dense_kernel("onednn", CPU, torch.bfloat16) == "onednn"
    assert resolve_dense_kernel("auto", CPU, torch.float32) == "onednn"
    assert resolve_dense_kernel("auto", CPU, torch.bfloat16, compiled=True) == "onednn"
    assert resolve_dense_kernel("auto", CPU, torch.bfloat16) == ("amx" if WHY is None else "onednn")
    with pytest.raises(KernelUnavailable, match=r"bfloat16 weights, not torch\.float32"):
        resolve_dense_kernel("amx", CPU, torch.float32)
    with pytest.raises(KernelUnavailable, match="compiled decode"):
        resolve_dense_kernel("amx", CPU, torch.bfloat16, compiled=True)
    with pytest.raises(ValueError, match="dense_kernel 'mkl'"):
        resolve_dense_kernel("mkl", CPU, torch.bfloat16)

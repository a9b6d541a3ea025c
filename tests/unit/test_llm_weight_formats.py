"""The engine's weight formats (dense, int8, int4), `dtype: auto`, and the export gate that
vouches for each format before serving loads it."""

from __future__ import annotations

import json

import pytest
import torch

from llm.artifacts import GATED_FORMATS, MANIFEST_FILE, gate_refusal, gated_format
from llm.contract import ScheduledChunk
from llm.engine.linear import DenseLinear, Int4Linear, Int8Linear, make_linear, prepacks, quantise_int4, quantise_int8
from llm.engine.precision import cpu_flags, resolve_dtype

CPU = torch.device("cpu")


def random_weight(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, columns, generator=torch.Generator().manual_seed(seed)) * 0.05


def activations(rows: int, columns: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(rows, columns, generator=torch.Generator().manual_seed(1)).to(dtype)


def int8_matrix(weight: torch.Tensor) -> torch.Tensor:
    q, scales = quantise_int8(weight)
    return q.float() * scales[:, None]


def int4_matrix(weight: torch.Tensor) -> torch.Tensor:
    q, scale, zero = quantise_int4(weight)
    rows, columns = q.shape
    groups = (q.float().view(rows, -1, 32) - 8) * scale[..., None] + zero[..., None]
    return groups.view(rows, columns)[: weight.shape[0]]


@pytest.mark.parametrize(("layer", "matrix"), [(Int8Linear, int8_matrix), (Int4Linear, int4_matrix)])
@pytest.mark.parametrize("shape", [(96, 64), (97, 64)])  # 97 rows: int4 pads to 112 and cuts back
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_quantised_linear_equals_the_matmul_with_its_dequantised_weights(layer, matrix, shape, dtype):
    """In either activation dtype, within bfloat16's precision: the kernels compute in bfloat16
    (linear.KERNEL_DTYPE) and hand back the activations' dtype."""
    weight = random_weight(*shape)
    x = activations(5, shape[1], dtype)
    out = layer(weight, dtype, CPU)(x)
    assert out.shape == (5, shape[0]) and out.dtype == dtype
    torch.testing.assert_close(out.float(), x.float() @ matrix(weight).T, atol=0.02, rtol=0.02)


@pytest.mark.skipif(not prepacks(torch.bfloat16, CPU), reason="this torch has no oneDNN")
@pytest.mark.parametrize("rows", [1, 16, 33])
def test_a_prepacked_bfloat16_weight_gives_the_plain_products_result(rows):
    weight = random_weight(97, 64)
    x = activations(rows, 64, torch.bfloat16)
    packed = DenseLinear(weight, torch.bfloat16, CPU)
    assert packed.packed is not None and packed.weight is None  # the plain copy is not kept
    plain = DenseLinear(weight, torch.bfloat16, CPU, prepack=False)
    assert plain.packed is None
    torch.testing.assert_close(packed(x), plain(x), atol=1e-2, rtol=1e-2)
    assert DenseLinear(weight, torch.float32, CPU).packed is None  # float32 keeps the plain product


@pytest.mark.skipif(not prepacks(torch.bfloat16, CPU), reason="this torch has no oneDNN")
def test_a_bfloat16_row_gets_the_same_bits_alone_and_in_any_batch():
    """SmolLM2's down projection shape, where oneDNN's product summed a batch's tail rows in another
    order (llm.engine.linear.INVARIANT_ROWS): a seeded sample must not change beside another stream."""
    weight = random_weight(576, 1536)
    x = activations(200, 1536, torch.bfloat16) * 4
    product = DenseLinear(weight, torch.bfloat16, CPU)
    alone = torch.cat([product(x[i : i + 1]) for i in range(0, 200, 9)])
    for rows in (2, 5, 17, 31, 64, 100, 200):
        together = product(x[:rows])
        assert together.shape == (rows, 576)
        assert torch.equal(together[0:rows:9], alone[: len(range(0, rows, 9))]), f"a row changed in a batch of {rows}"


@pytest.mark.skipif(not prepacks(torch.bfloat16, CPU), reason="this torch has no oneDNN")
def test_without_batch_invariance_a_wide_step_is_one_product_with_the_same_values():
    """`batch_invariant: false` trades the padded row blocks (a row's bits independent of the
    batch) for one unpadded oneDNN product per layer: the same values to bfloat16's precision."""
    weight = random_weight(576, 1536)
    x = activations(205, 1536, torch.bfloat16)
    results = {}
    for invariant in (True, False):
        product = DenseLinear(weight, torch.bfloat16, CPU, batch_invariant=invariant)
        calls, inner = [], product._product
        product._product = lambda rows, padded=True, inner=inner, calls=calls: calls.append((len(rows), padded)) or inner(rows, padded)
        results[invariant] = product(x)
        assert calls == ([(32, True)] * 6 + [(13, True)] if invariant else [(205, False)])
    torch.testing.assert_close(results[False], results[True], atol=2e-2, rtol=2e-2)


def test_quantisation_error_stays_within_half_a_step():
    weight = random_weight(64, 96)
    _, scales = quantise_int8(weight)
    assert ((int8_matrix(weight) - weight).abs() <= scales[:, None] / 2 + 1e-7).all()
    _, scale, _ = quantise_int4(weight)
    assert ((int4_matrix(weight) - weight).abs().view(64, -1, 32) <= scale[..., None] / 2 + 1e-7).all()


def test_quantisation_is_deterministic():
    weight = random_weight(48, 64)
    first, second = Int4Linear(weight, torch.float32, CPU), Int4Linear(weight, torch.float32, CPU)
    assert torch.equal(first.packed, second.packed) and torch.equal(first.scale_and_zeros, second.scale_and_zeros)
    assert torch.equal(quantise_int8(weight)[0], quantise_int8(weight)[0])


def test_int4_refuses_an_input_width_that_is_not_a_multiple_of_32():
    with pytest.raises(ValueError, match="divisible by 32"):
        Int4Linear(random_weight(16, 48), torch.float32, CPU)


def test_quantised_formats_refuse_cuda_and_unknown_formats():
    with pytest.raises(ValueError, match="CPU only"):
        make_linear(random_weight(16, 32), "int8", torch.float32, torch.device("cuda"))
    with pytest.raises(ValueError, match="not one of dense, int8, int4"):
        make_linear(random_weight(16, 32), "int2", torch.float32, CPU)


@pytest.mark.parametrize(
    ("flags", "resolved"),
    [
        ({"avx512f", "amx_tile", "amx_bf16"}, "bfloat16"),  # Xeon with AMX
        ({"avx512f", "avx512_bf16"}, "bfloat16"),
        ({"avx2", "fma", "f16c"}, "float32"),  # the AVX2 EPYC: bf16 products run 3.3x slower there
        (set(), "float32"),
    ],
)
def test_auto_dtype_follows_the_cpu_flags(flags, resolved):
    assert resolve_dtype("auto", "cpu", flags) == resolved


def test_auto_dtype_is_bfloat16_on_cuda_and_a_named_dtype_is_kept():
    assert resolve_dtype("auto", "cuda", set()) == "bfloat16"
    assert resolve_dtype("float32", "cpu", {"amx_bf16"}) == "float32"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu avx2 amx_bf16\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


# The engine on a tiny random Llama whose input widths suit int4 (multiples of 32).


@pytest.fixture(scope="module")
def hf_model():
    pytest.importorskip("transformers")
    from tests.unit.tiny_llama import tiny_hf_llama

    return tiny_hf_llama(num_heads=8, intermediate_size=96)


def logits_of(hf_model, weights: str, dtype: str = "float32", tokens: list[int] | None = None) -> torch.Tensor:
    from tests.unit.tiny_llama import tiny_executor

    tokens = tokens or torch.randint(3, 97, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    executor = tiny_executor(hf_model, 16, 4, dtype, weights)
    return executor.execute([ScheduledChunk(0, tokens, 0, tuple(range(5)), True)])[0]


@pytest.mark.parametrize(("weights", "tolerance"), [("int8", 0.02), ("int4", 0.15)])  # of the largest |logit|
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantised_weights_give_logits_close_to_dense(hf_model, weights, tolerance, dtype):
    dense = logits_of(hf_model, "dense")
    quantised = logits_of(hf_model, weights, dtype)
    assert quantised.dtype == torch.float32
    assert (quantised - dense).abs().max() <= tolerance * dense.abs().max()
    assert int(quantised.argmax()) == int(dense.argmax())


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_a_quantised_sequence_gets_the_same_logits_whatever_shares_its_step(hf_model, weights):
    from tests.unit.tiny_llama import tiny_executor

    tokens = torch.randint(3, 97, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    alone = tiny_executor(hf_model, 16, 4, "float32", weights).execute([ScheduledChunk(0, tokens, 0, (0, 1, 2), True)])[0]
    shared = tiny_executor(hf_model, 16, 4, "float32", weights)
    other = torch.randint(3, 97, (13,), generator=torch.Generator().manual_seed(5)).tolist()
    both = shared.execute([ScheduledChunk(1, other, 0, (3, 4, 5, 6), True), ScheduledChunk(0, tokens, 0, (0, 1, 2), True)])
    torch.testing.assert_close(both[1], alone, atol=1e-5, rtol=0)


def test_the_executor_reports_the_resolved_dtype(hf_model):
    from tests.unit.tiny_llama import tiny_executor

    executor = tiny_executor(hf_model, 16, 4, "auto", "int8")
    assert executor.config.dtype == resolve_dtype("auto", "cpu") and executor.config.weights == "int8"


# The gate: the export records each format's figures; serving refuses a format that did not pass.


def write_manifest(folder, parity: dict) -> None:
    (folder / MANIFEST_FILE).write_text(json.dumps({"parity": parity}))


def test_the_gate_names_each_served_format():
    assert gated_format("dense", "float32") == "dense-float32"
    assert gated_format("int4", "float32") == gated_format("int4", "bfloat16") == "int4"
    assert gated_format("dense", "float16") is None  # not a shipped format: not gated


def test_serving_refuses_a_format_whose_gate_failed_or_is_missing(tmp_path):
    write_manifest(tmp_path, {"dense-float32": {"passed": True}, "int4": {"passed": False, "top1_agreement": 0.8, "min_agreement": 0.9}})
    assert gate_refusal(tmp_path, "dense", "float32") is None
    assert gate_refusal(tmp_path, "dense", "float16") is None
    failed = gate_refusal(tmp_path, "int4", "bfloat16")
    assert "failed the export's parity gate" in failed and "0.8" in failed and "make export" in failed
    assert "make export" in gate_refusal(tmp_path, "int8", "float32")
    assert "make export" in gate_refusal(tmp_path / "nowhere", "dense", "float32")


def test_an_export_from_before_the_per_format_gate_still_vouches_for_its_own_dense_format(tmp_path):
    write_manifest(tmp_path, {"dtype": "float32", "top1_agreement": 1.0, "min_agreement": 1.0, "passed": True})
    assert gate_refusal(tmp_path, "dense", "float32") is None
    assert "make export" in gate_refusal(tmp_path, "dense", "bfloat16")
    assert "make export" in gate_refusal(tmp_path, "int8", "float32")


def test_the_export_gates_every_format_and_records_a_failure_without_raising(hf_model, tmp_path, monkeypatch):
    from export.llm import native_export
    from llm.engine import LlamaDims, save_checkpoint
    from llm.engine.checkpoint import fuse_hf_state_dict

    dims = LlamaDims.from_hf_config(hf_model.config)
    save_checkpoint(tmp_path, dims, fuse_hf_state_dict(hf_model.state_dict(), dims))
    monkeypatch.setattr(native_export, "NEW_TOKENS", 4)
    monkeypatch.setattr(native_export, "QUANTISED_MIN_AGREEMENT", 1.01)  # no quantised format can pass
    prompts = [torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (7, 12)]
    figures = native_export.gate_formats(tmp_path, hf_model, prompts, "float32")
    assert list(figures) == ["dense-float32", *(name for name in GATED_FORMATS if name != "dense-float32")]
    assert figures["dense-float32"]["passed"] and figures["dense-float32"]["top1_agreement"] == 1.0
    assert not figures["int8"]["passed"] and not figures["int4"]["passed"]
    assert all(entry["max_abs_logit_diff"] is not None and entry["gate_s"] >= 0 for entry in figures.values())
    assert figures["int8"]["weights"] == "int8" and figures["int8"]["dtype"] == "bfloat16"
    write_manifest(tmp_path, figures)
    assert gate_refusal(tmp_path, "dense", "float32") is None
    assert "failed" in gate_refusal(tmp_path, "int8", "float32")


@pytest.mark.parametrize(("weights", "dtype"), [("int4", "auto"), ("dense", "float32")])
def test_a_calibration_measures_and_records_the_weight_format_and_the_resolved_dtype(tmp_path, weights, dtype):
    from llm.engine import LlamaDims, save_checkpoint
    from llm.engine.checkpoint import fuse_hf_state_dict
    from tests.unit.tiny_llama import tiny_hf_llama
    from tools.simulate.llm.calibrate import Design, measure

    hf_model = tiny_hf_llama(num_heads=8, intermediate_size=96, vocab_size=1152)  # the calibration's tokens are 100-1099
    dims = LlamaDims.from_hf_config(hf_model.config)
    save_checkpoint(tmp_path, dims, fuse_hf_state_dict(hf_model.state_dict(), dims))
    design = Design(
        prefills=(8, 16), continued=(), decode_batches=(1, 2, 4), decode_contexts=(8, 24), mixed=(), mixed_continued=(), repeats=1
    )
    model = measure(tmp_path, design, dtype, threads=1, weights=weights)
    assert model.engine["weights"] == weights and model.engine["dtype"] == resolve_dtype(dtype, "cpu")
    assert len(model.fit["steps"]) == 2 + 3 * 2

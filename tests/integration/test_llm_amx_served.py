"""Our AMX product (llm/engine/kernels/amx_linear.cpp) serving `llm` in the real Triton: the
model loaded in bfloat16 with `dense_kernel: amx` answers, and a seeded request's text is the
same alone and beside another stream (the kernel keeps every row's bits whatever shares its
step). Skipped where the CPU has no AMX."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from llm.engine.linear import amx_unavailable
from tests.conftest import start_triton
from tests.integration.llm_streams import LlmStream, grpc_inputs
from tools.contract import LLM_MODEL

pytestmark = pytest.mark.integration

WHY = amx_unavailable(torch.device("cpu"))


@pytest.fixture(scope="module")
def amx_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A server of this module's own with `llm` reloaded in bfloat16 on our AMX product, with
    batch_invariant off: the kernel alone must keep the rows apart."""
    if WHY is not None:
        pytest.skip(f"our AMX product cannot run here: {WHY}")
    server = start_triton(
        tmp_path_factory.mktemp("llm-amx") / "triton.log", with_llm=True, model_control_mode="explicit", load_models=(LLM_MODEL,)
    )
    try:
        client = server.client
        config = client.config(LLM_MODEL)
        for key, value in {"dtype": "bfloat16", "dense_kernel": "amx", "batch_invariant": "false"}.items():
            config.parameters[key].string_value = value
        client.reload(LLM_MODEL, config)
        yield server
    finally:
        server.stop()


@pytest.fixture
def stream(amx_triton):
    connection = LlmStream(amx_triton.options.grpc_url)
    yield connection
    connection.close(cancel=True)


def test_the_model_loads_on_our_amx_product_and_answers(amx_triton, stream) -> None:
    assert "dense_kernel='amx'" in amx_triton.log_path.read_text()  # the load line names the resolved engine settings
    _, received = stream.send(grpc_inputs("The capital of France is", sampling={"max_tokens": 8, "temperature": 0}))
    stream.wait(lambda: received.done)
    assert received.error is None and "Paris" in received.text


def test_a_seeded_sample_is_the_same_alone_and_beside_other_streams(stream) -> None:
    seeded = {"max_tokens": 16, "temperature": 1.0, "top_p": 0.95, "seed": 99, "ignore_eos": True}
    _, alone = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: alone.done)
    others = [
        stream.send(grpc_inputs(prompt, sampling={"max_tokens": 24, "temperature": 1.0, "seed": n}))[1]
        for n, prompt in enumerate(("List three colours.", "Describe a long walk along a quiet beach at dawn, in detail."))
    ]
    _, again = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: again.done and all(other.done for other in others))
    assert again.error is None and again.text == alone.text

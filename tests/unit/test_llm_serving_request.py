"""Each LLM request is parsed and validated before it reaches the engine; every problem is
refused with a message naming the input and the rule."""

from __future__ import annotations

import json

import pytest

from llm.contract import SamplingParams, check_request_fits
from llm.serving.request import RequestError, parse_request, parse_sampling_parameters

LIMIT = 8191


def parse(**inputs):
    return parse_request({"text_input": b"Hello", **inputs}, LIMIT)


def sampling(**params) -> bytes:
    return json.dumps(params).encode()


def test_a_bare_prompt_gets_the_defaults_and_one_response_with_the_prompt_prepended() -> None:
    request = parse()
    assert request.prompt == "Hello"
    assert request.params == SamplingParams()
    assert not request.stream and not request.exclude_input_in_output


def test_streaming_excludes_the_input_by_default() -> None:
    assert parse(stream=True).exclude_input_in_output


def test_streaming_with_the_input_included_is_refused() -> None:
    with pytest.raises(RequestError, match="exclude_input_in_output"):
        parse(stream=True, exclude_input_in_output=False)


def test_every_sampling_parameter_is_read_with_vllm_names() -> None:
    raw = sampling(max_tokens=7, temperature=0.5, top_p=0.9, top_k=40, seed=3, stop=["\n", "."], ignore_eos=True, min_tokens=2, priority=1)
    assert parse(sampling_parameters=raw).params == SamplingParams(7, 0.5, 0.9, 40, 3, ("\n", "."), True, 2, 1)


def test_the_adapter_is_named_by_lora_name_as_the_vllm_backend_reads_it() -> None:
    assert parse(sampling_parameters=sampling(lora_name="pirate")).params.lora_name == "pirate"
    assert parse(sampling_parameters=sampling(max_tokens=3)).params.lora_name is None


def test_a_single_stop_string_is_accepted() -> None:
    assert parse(sampling_parameters=sampling(stop="END")).params.stop == ("END",)


def test_request_parameters_stand_in_for_a_missing_sampling_parameters_input() -> None:
    request = parse_request({"text_input": b"Hi"}, LIMIT, request_parameters=json.dumps({"max_tokens": 3}))
    assert request.params.max_tokens == 3


def test_the_return_flags_ask_for_the_additional_outputs() -> None:
    request = parse(return_finish_reason=True, return_num_output_tokens=True)
    assert request.return_finish_reason and request.return_num_output_tokens and not request.return_num_input_tokens


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"text_input": b""}, "text_input is empty"),
        ({"text_input": b"caf\xe9"}, r"text_input is not valid UTF-8 \(byte 0xe9 at offset 3\)"),
        ({"sampling_parameters": b"{max_tokens: 3"}, "sampling_parameters is not valid JSON"),
        ({"sampling_parameters": b"[1, 2]"}, "must be a JSON object, got list"),
        ({"sampling_parameters": b"\xff"}, "sampling_parameters is not valid UTF-8"),
        ({"sampling_parameters": sampling(max_token=3)}, "unknown key.*max_token"),
        ({"sampling_parameters": sampling(max_tokens="three")}, "max_tokens must be an integer"),
        ({"sampling_parameters": sampling(max_tokens="2.5")}, "max_tokens must be an integer"),
        ({"sampling_parameters": sampling(ignore_eos="yes")}, "ignore_eos must be true or false"),
        ({"sampling_parameters": sampling(max_tokens=2.0)}, "max_tokens must be an integer"),
        ({"sampling_parameters": sampling(ignore_eos=1)}, "ignore_eos must be true or false"),
        ({"sampling_parameters": sampling(temperature="hot")}, "temperature must be a finite number"),
        ({"sampling_parameters": sampling(stop=[1])}, "stop must be"),
        ({"sampling_parameters": sampling(max_tokens=0)}, r"max_tokens must be in \[1, 8191\], got 0"),
        ({"sampling_parameters": sampling(max_tokens=-5)}, "max_tokens must be in"),
        ({"sampling_parameters": sampling(max_tokens=LIMIT + 1)}, "max_tokens must be in"),
        ({"sampling_parameters": sampling(temperature=-0.1)}, "temperature must be >= 0"),
        ({"sampling_parameters": sampling(top_p=0)}, r"top_p must be in \(0, 1\]"),
        ({"sampling_parameters": sampling(top_p=1.5)}, r"top_p must be in \(0, 1\]"),
        ({"sampling_parameters": sampling(top_k=-1)}, "top_k must be >= 0"),
        ({"sampling_parameters": sampling(max_tokens=4, min_tokens=5)}, "min_tokens must be in"),
        ({"sampling_parameters": sampling(lora_name="")}, "lora_name must be an adapter's name"),
        ({"sampling_parameters": sampling(lora_name=3)}, "lora_name must be an adapter's name"),
    ],
)
def test_bad_input_is_refused_with_a_message_naming_it(inputs: dict, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse(**inputs) if "text_input" not in inputs else parse_request(inputs, LIMIT)


def test_numbers_and_flags_sent_as_strings_are_read_as_the_vllm_backend_reads_them() -> None:
    """GenAI-Perf's --extra-inputs sends every value as a string; Triton's vLLM backend converts them."""
    params = parse(sampling_parameters=sampling(max_tokens="32", temperature="0.5", top_k=" 4", ignore_eos="true")).params
    assert (params.max_tokens, params.temperature, params.top_k, params.ignore_eos) == (32, 0.5, 4, True)


def test_a_missing_prompt_is_refused() -> None:
    with pytest.raises(RequestError, match="text_input is missing"):
        parse_request({}, LIMIT)


def test_an_empty_sampling_parameters_string_means_the_defaults() -> None:
    assert parse_sampling_parameters(b"", LIMIT) == SamplingParams()


def test_the_context_window_must_hold_the_prompt_and_every_token_it_may_generate() -> None:
    check_request_fits(100, 28, max_model_len=128)
    with pytest.raises(ValueError, match=r"the prompt has 128 tokens; the context window.*128"):
        check_request_fits(128, 1, max_model_len=128)
    with pytest.raises(ValueError, match="lower max_tokens to at most 28"):
        check_request_fits(100, 29, max_model_len=128)
    with pytest.raises(ValueError, match="no tokens"):
        check_request_fits(0, 16, max_model_len=128)


def test_the_kv_cache_must_hold_them_too_where_its_size_is_given() -> None:
    check_request_fits(10, 10, max_model_len=128, kv_cache_tokens=20)
    with pytest.raises(ValueError, match=r"prompt \+ max_tokens = 21 tokens exceeds the KV cache \(20 tokens\)"):
        check_request_fits(10, 11, max_model_len=128, kv_cache_tokens=20)

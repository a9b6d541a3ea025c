"""The gateway's LLM side without a server: OpenAI requests checked field by field, the
answers in OpenAI's shapes, the `llm` model's stream errors mapped to statuses."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import APIError
from gateway.llm.admission import Admission
from gateway.llm.completion_render import DONE, Completion
from gateway.llm.completions import CHAT, COMPLETION, COMPLETIONS_DEFAULT_MAX_TOKENS, parse_chat, parse_completion
from gateway.llm.triton import error_from_message
from gateway.settings import LLM_PRIORITIES, GatewaySettings

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


def refusal(parse, payload: dict) -> APIError:
    with pytest.raises(APIError) as raised:
        parse(payload, "llm")
    return raised.value


def test_a_completion_carries_the_prompt_and_openais_sampling_fields_under_vllms_names() -> None:
    request = parse_completion(
        {"model": "llm", "prompt": "Hi", "max_tokens": 5, "temperature": 0, "top_p": 0.9, "seed": 3, "stop": "."}, "llm"
    )
    assert request.kind == COMPLETION and request.prompt == "Hi" and not request.stream
    assert request.sampling_parameters(priority=-1, max_tokens=5) == {
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 3,
        "stop": ["."],
        "max_tokens": 5,
        "priority": -1,
    }


def test_completions_default_to_openais_16_tokens_and_chat_to_the_context_window() -> None:
    assert parse_completion({"model": "llm", "prompt": ["Hi"]}, "llm").max_tokens == COMPLETIONS_DEFAULT_MAX_TOKENS
    assert parse_chat({"model": "llm", "messages": MESSAGES}, "llm").max_tokens is None


def test_chat_reads_text_parts_and_prefers_max_completion_tokens() -> None:
    request = parse_chat({"model": "llm", "messages": MESSAGES, "max_tokens": 9, "max_completion_tokens": 4}, "llm")
    assert request.kind == CHAT and request.max_tokens == 4
    assert request.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    developer = parse_chat({"model": "llm", "messages": [{"role": "developer", "content": "x"}]}, "llm")
    assert developer.messages[0]["role"] == "system"


@pytest.mark.parametrize(
    ("payload", "param", "code"),
    [
        ({"model": "llm", "prompt": "Hi", "n": 2}, "n", "unsupported_value"),
        ({"model": "llm", "prompt": "Hi", "n": 0}, "n", "invalid_value"),
        ({"model": "llm", "prompt": "Hi", "best_of": 3}, "best_of", "unsupported_parameter"),
        ({"model": "llm", "prompt": "Hi", "echo": True}, "echo", "unsupported_parameter"),
        ({"model": "llm", "prompt": "Hi", "presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
        ({"model": "llm", "prompt": "Hi", "max_tokens": "5"}, "max_tokens", "invalid_type"),
        ({"model": "llm", "prompt": "Hi", "top_p": 0}, "top_p", "invalid_value"),
        ({"model": "llm", "prompt": "Hi", "temperature": True}, "temperature", "invalid_type"),
        ({"model": "llm", "prompt": "Hi", "stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"model": "llm", "prompt": [1, 2, 3]}, "prompt", "unsupported_input"),
        ({"model": "llm", "prompt": ["a", "b"]}, "prompt", "unsupported_value"),
        ({"model": "llm", "prompt": ""}, "prompt", "invalid_value"),
        ({"model": "llm", "prompt": "Hi", "stream": "yes"}, "stream", "invalid_type"),
        ({"model": "llm", "prompt": "Hi", "stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
        ({"prompt": "Hi"}, "model", "missing_required_parameter"),
        ({"model": "llm", "prompt": "Hi", "messages": []}, "messages", "unknown_parameter"),
    ],
)
def test_completion_refusals_name_the_field(payload: dict, param: str, code: str) -> None:
    error = refusal(parse_completion, payload)
    assert (error.status, error.param, error.code) == (400, param, code)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ("Hi", "messages"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content[0]"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}], "messages[0]"),
    ],
)
def test_chat_refusals_name_the_message(messages: object, param: str) -> None:
    assert refusal(parse_chat, {"model": "llm", "messages": messages}).param == param


def test_another_model_name_is_a_404() -> None:
    error = refusal(parse_chat, {"model": "gpt-4o", "messages": MESSAGES})
    assert (error.status, error.code) == (404, "model_not_found")


def test_interactive_requests_rank_before_bulk_under_the_models_lower_first_rule() -> None:
    assert LLM_PRIORITIES["interactive"] < LLM_PRIORITIES["bulk"] == 0


@pytest.mark.parametrize(
    ("message", "status", "param"),
    [
        ("server busy: 4 requests are already waiting (max_waiting)", 429, None),
        ("sampling_parameters.max_tokens must be in [1, 8191], got 9000", 400, "max_tokens"),
        ("the prompt (5 tokens) plus max_tokens (9000) exceed the context window", 400, "max_tokens"),
        ("text_input is empty: give a prompt", 400, "prompt"),
        ("cannot serve the request: the loop is stopping", 503, None),
        ("Request for unknown model: 'llm' is not found", 503, None),
    ],
)
def test_the_models_stream_errors_become_the_status_a_client_acts_on(message: str, status: int, param: str | None) -> None:
    error = error_from_message(message, retry_after_s=2)
    assert (error.status, error.param) == (status, param)
    assert (error.headers().get("Retry-After") == "2") == (status in (429, 503))


def chunk_body(data: bytes) -> dict:
    assert data.startswith(b"data: ") and data.endswith(b"\n\n")
    return orjson.loads(data[6:])


def test_a_chat_stream_opens_with_the_role_and_ends_with_usage_when_asked() -> None:
    completion = Completion(
        parse_chat({"model": "llm", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}, "llm")
    )
    completion.count(7, 1)
    first = chunk_body(completion.chunk("Hel", None, first=True))
    completion.count(7, 2)
    last = chunk_body(completion.chunk("lo", "length"))
    usage = chunk_body(completion.usage_chunk())
    assert first["object"] == "chat.completion.chunk" and first["id"].startswith("chatcmpl-") and first["id"] == last["id"]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hel"} and first["usage"] is None
    assert last["choices"][0] == {"index": 0, "delta": {"content": "lo"}, "logprobs": None, "finish_reason": "length"}
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert DONE == b"data: [DONE]\n\n"


def test_a_whole_completion_has_openais_text_completion_shape() -> None:
    completion = Completion(parse_completion({"model": "llm", "prompt": "Hi"}, "llm"))
    completion.count(2, 4)
    body = completion.body(" there", "abort")
    assert body["object"] == "text_completion" and "usage" not in completion.chunk("x", None).decode()
    assert body["choices"] == [{"index": 0, "text": " there", "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"]["total_tokens"] == 6


def test_the_llm_options_travel_to_a_child_gateway(tmp_path) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    settings = GatewaySettings(tokenizer_path=tokenizer, llm_model="", llm_timeout_s=30.0)
    argv = settings.to_cli_args()
    assert argv[argv.index("--llm-model") + 1] == "" and argv[argv.index("--llm-timeout") + 1] == "30.0"
    with pytest.raises(ValueError, match="both served as"):
        GatewaySettings(tokenizer_path=tokenizer, served_llm_name="embed").validate()


def test_admission_refuses_past_its_limit_and_a_slot_frees_its_place_once() -> None:
    admission = Admission(limit=2, retry_after_s=1)
    first, _second = admission.admit(), admission.admit()
    with pytest.raises(APIError) as refused:
        admission.admit()
    assert (refused.value.status, refused.value.code) == (429, "too_many_streams")
    first.release()
    first.release()  # every exit path releases: only the first counts
    assert admission.open == 1
    admission.admit()
    assert admission.open == 2

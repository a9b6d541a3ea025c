"""The LLM soak's verdict pieces, without a server: which outcome each kind of request may end
with, what the model should have counted, and how memory growth is read from the windows."""

from __future__ import annotations

from tools.reliability.llm.soak import client_finished, growth
from tools.reliability.llm.traffic import CANCELLED, ERROR, HUNG, OK, REJECTED, Outcome


def outcome(kind: str, result: str, message: str = "", finish_reason: str | None = None) -> Outcome:
    return Outcome(0, kind, 0.0, 1.0, result, finish_reason, 0, message)


def test_a_good_request_may_be_answered_or_refused_as_overload_but_never_hang_or_fail() -> None:
    assert outcome("grpc", OK).expected and outcome("openai_chat", REJECTED, "HTTP 429 (Retry-After 1): ...").expected
    assert not outcome("openai_chat", REJECTED, "HTTP 429: ...").expected, "a 429 without Retry-After"
    assert not outcome("grpc", HUNG).expected and not outcome("generate_stream", ERROR, "boom").expected
    assert not outcome("grpc", CANCELLED).expected


def test_a_disconnecting_client_must_have_left_before_the_answer_ended() -> None:
    assert outcome("grpc_disconnect", CANCELLED).expected
    assert not outcome("openai_disconnect", OK, finish_reason="length").expected


def test_a_bad_request_must_fail_with_the_words_of_its_own_error() -> None:
    assert outcome("bad_grpc_empty_prompt", ERROR, "text_input is empty").expected
    assert not outcome("bad_grpc_empty_prompt", ERROR, "something else").expected
    assert not outcome("bad_openai_no_messages", OK).expected


def test_the_model_should_count_answers_by_finish_reason_and_clients_that_left_as_aborts() -> None:
    outcomes = [
        outcome("grpc", OK, finish_reason="length"),
        outcome("openai_chat", OK, finish_reason="stop"),
        outcome("grpc_disconnect", CANCELLED),
        outcome("burst_grpc", REJECTED, "server busy"),
        outcome("bad_grpc_empty_prompt", ERROR, "text_input is empty"),
    ]
    assert client_finished(outcomes) == {"stop": 1, "length": 1, "abort": 1, "timeout": 0, "error": 0}


def test_memory_growth_compares_levels_under_load_not_the_idle_first_sample() -> None:
    windows = [{"t_s": 0.0, "stub": 300.0}] + [{"t_s": float(t), "stub": 800.0 + t} for t in range(1, 9)]
    assert growth(windows) == {"stub": 5.0}  # median of 6,7,8 minus median of 1,2,3

"""Engine outputs become responses as Triton's vLLM backend sends them: streamed deltas with
the last flagged final, or one final response with the whole text; errors end it once."""

from __future__ import annotations

from llm.contract import RequestOutput
from llm.serving.request import parse_request
from llm.serving.responses import ResponsePlan


def plan(**inputs) -> ResponsePlan:
    return ResponsePlan(parse_request({"text_input": b"Q: ", **inputs}, 100))


def step(text: str, tokens: int = 1, finished: bool = False, reason: str | None = None, error: str | None = None) -> RequestOutput:
    return RequestOutput("r", text, list(range(tokens)), finished, reason, num_prompt_tokens=3, error=error)


def test_a_stream_sends_each_delta_and_flags_the_last_final() -> None:
    replies = plan(stream=True)
    sent = [r for output in (step("A"), step("B"), step("", finished=True, reason="stop")) for r in replies.replies(output)]
    assert [(r.text, r.final) for r in sent] == [("A", False), ("B", False), ("", True)]
    assert sent[-1].finish_reason == "stop"


def test_a_stream_skips_steps_without_text_and_counts_their_tokens_in_the_next_reply() -> None:
    replies = plan(stream=True)
    assert replies.replies(step("", tokens=1)) == []
    (reply,) = replies.replies(step("é", tokens=1))
    assert reply.num_output_tokens == 2


def test_without_streaming_one_final_reply_carries_the_prompt_and_the_whole_text() -> None:
    replies = plan()
    assert replies.replies(step("Par")) == []
    (reply,) = replies.replies(step("is", finished=True, reason="length"))
    assert (reply.text, reply.final, reply.finish_reason, reply.num_output_tokens, reply.num_input_tokens) == (
        "Q: Paris",
        True,
        "length",
        2,
        3,
    )


def test_exclude_input_in_output_leaves_the_prompt_out() -> None:
    replies = plan(exclude_input_in_output=True)
    (reply,) = replies.replies(step("Paris", finished=True, reason="stop"))
    assert reply.text == "Paris"


def test_an_engine_error_ends_the_request_with_one_final_error() -> None:
    replies = plan(stream=True)
    (reply,) = replies.replies(step("", finished=True, reason="error", error="boom"))
    assert reply.final and reply.error == "boom" and not reply.cancelled
    assert replies.replies(step("late", finished=True)) == [], "nothing after the final reply"


def test_a_cancelled_request_ends_with_a_cancelled_error() -> None:
    (reply,) = plan().replies(step("", finished=True, reason="abort"))
    assert reply.final and reply.cancelled

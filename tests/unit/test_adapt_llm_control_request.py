"""The live control request's parsing and authorization (llm/serving/control.py)."""

from __future__ import annotations

import pytest

from llm.serving.control import ControlRefused, control_request, parse_control

ENV = {"LLM_CONTROL_KEY": "secret"}


def test_only_requests_with_llm_control_are_control_requests():
    assert control_request({"llm_control": "{}"}) and not control_request({"temperature": 0})


def test_an_authorized_request_gives_its_knob_changes():
    parameters = {"llm_control": '{"max_num_batched_tokens": 256, "max_wait_ms": "5"}', "llm_control_key": "secret"}
    assert parse_control(parameters, ENV) == {"max_num_batched_tokens": 256, "max_wait_ms": 5.0}


def test_the_channel_is_off_without_a_key_in_the_environment():
    with pytest.raises(ControlRefused, match="off"):
        parse_control({"llm_control": '{"max_wait_ms": 1}', "llm_control_key": "secret"}, {})


def test_a_wrong_or_missing_key_is_refused():
    with pytest.raises(ControlRefused):
        parse_control({"llm_control": '{"max_wait_ms": 1}', "llm_control_key": "guess"}, ENV)
    with pytest.raises(ControlRefused):
        parse_control({"llm_control": '{"max_wait_ms": 1}'}, ENV)


def test_the_admin_key_serves_when_no_control_key_is_set():
    parameters = {"llm_control": '{"max_wait_ms": 1}', "llm_control_key": "admin"}
    assert parse_control(parameters, {"TRITON_ADMIN_KEY": "admin"}) == {"max_wait_ms": 1.0}


@pytest.mark.parametrize("body", ["not json", "[]", "{}", '{"max_num_batched_tokens": 1.5}', '{"max_wait_ms": true}'])
def test_malformed_control_bodies_are_refused_with_a_value_error(body):
    with pytest.raises(ValueError):
        parse_control({"llm_control": body, "llm_control_key": "secret"}, ENV)

"""The live control channel: a request that changes the step limits instead of generating.

A control request is an ordinary `llm` request (any `text_input`, ignored) whose Triton
request parameters hold `llm_control`, a JSON object of the knobs that change live
(max_num_batched_tokens, max_wait_ms), and `llm_control_key`. It is refused unless the
key equals the one in Triton's environment: `LLM_CONTROL_KEY`, else `TRITON_ADMIN_KEY`
(the admin key the Docker and Kubernetes entrypoints already export); with neither set
the channel is off. So a client that may not reload models may not retune them either.
The model applies it with EngineLoop.update_config between steps: no reload, no stream cut.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Mapping

CONTROL_PARAMETER = "llm_control"
KEY_PARAMETER = "llm_control_key"
KEY_VARIABLES = ("LLM_CONTROL_KEY", "TRITON_ADMIN_KEY")


class ControlRefused(PermissionError):
    """A control request without the right key, or with the channel off."""


def control_request(request_parameters: Mapping[str, object]) -> bool:
    return CONTROL_PARAMETER in request_parameters


def expected_key(environ: Mapping[str, str] = os.environ) -> str | None:
    return next((environ[name] for name in KEY_VARIABLES if environ.get(name)), None)


def parse_control(request_parameters: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> dict[str, float]:
    """The knob changes of an authorized control request; ControlRefused or ValueError otherwise."""
    key = expected_key(environ)
    if key is None:
        raise ControlRefused(f"the live control channel is off: set {' or '.join(KEY_VARIABLES)} in Triton's environment")
    given = request_parameters.get(KEY_PARAMETER)
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), key.encode()):
        raise ControlRefused(f"a control request needs the right {KEY_PARAMETER}")
    raw = request_parameters[CONTROL_PARAMETER]
    try:
        changes = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ValueError(f"{CONTROL_PARAMETER} is not JSON: {exc}") from None
    if not isinstance(changes, dict) or not changes:
        raise ValueError(f'{CONTROL_PARAMETER} must be a JSON object of knobs, e.g. {{"max_num_batched_tokens": 256}}')
    values: dict[str, float] = {}
    for name, value in changes.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{name} must be a number")
        number = float(value)
        values[name] = int(number) if name == "max_num_batched_tokens" else number
        if name == "max_num_batched_tokens" and number != int(number):
            raise ValueError("max_num_batched_tokens must be a whole number")
    return values

"""Overload meets bounded, per-level queues: fast rejections, priority 1 ahead of
priority 2, timeouts as configured, and every request accounted for on both sides."""

from __future__ import annotations

import concurrent.futures
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tools.embed import client_module
from tools.overload import run_overload

pytestmark = pytest.mark.integration


def test_overload_is_shed_by_rejection_priority_1_first_and_every_request_is_reconciled(policy_triton) -> None:
    result = run_overload(policy_triton, rate=400, seconds=5, mix={1: 0.2, 2: 0.8})
    assert result.reconciled, result
    assert set(result.outcomes) <= {"ok", "rejected", "timeout"}, result.outcomes
    level1, level2 = result.levels
    assert level2.rejected > 0, "an overload of the bulk level is rejected, not queued without bound"
    assert level1.rejected / level1.sent < level2.rejected / level2.sent
    assert level1.ok / level1.sent > level2.ok / level2.sent
    assert level1.p50_ms < level2.p50_ms


def encoder_inputs(module, rows: int, length: int) -> list:
    ids = np.full((rows, length), 2000, dtype=np.int64)
    tensors = []
    for name in ("INPUT_IDS", "ATTENTION_MASK"):
        tensor = module.InferInput(name, [rows, length], "INT64")
        tensor.set_data_from_numpy(ids if name == "INPUT_IDS" else np.ones_like(ids))
        tensors.append(tensor)
    return tensors


def call(url: str, priority: int = 0, timeout_us: int | None = None, rows: int = 1, length: int = 16) -> str:
    module = client_module("grpc")
    client = module.InferenceServerClient(url)
    try:
        client.infer("encoder", encoder_inputs(module, rows, length), priority=priority, timeout=timeout_us)
        return "ok"
    except InferenceServerException as exc:
        return str(exc)
    finally:
        client.close()


def with_backlog(url: str, probes: list[dict], backlog: int = 3) -> tuple[list[str], list[str]]:
    """Keep the encoder busy with full 32 x 256 batches, then send the probe requests."""
    with concurrent.futures.ThreadPoolExecutor(backlog + len(probes)) as pool:
        busy = [pool.submit(call, url, 2, None, 32, 256) for _ in range(backlog)]
        time.sleep(0.3)
        answers = [pool.submit(call, url, **probe) for probe in probes]
        return [f.result(timeout=120) for f in answers], [f.result(timeout=120) for f in busy]


def test_per_request_timeout_is_honoured_where_overrides_are_allowed(policy_triton) -> None:
    (level2, level1), _ = with_backlog(
        policy_triton.options.grpc_url, [{"priority": 2, "timeout_us": 1000}, {"priority": 1, "timeout_us": 1000}]
    )
    assert "timeout" in level2.lower(), level2
    assert level1 == "ok", "level 1 has allow_timeout_override false: the 1 ms timeout is ignored"


def test_default_timeout_rejects_requests_left_waiting_too_long(policy_triton) -> None:
    _, busy = with_backlog(policy_triton.options.grpc_url, [], backlog=8)
    outcomes = ["ok" if answer == "ok" else "timeout" if "timeout" in answer.lower() else answer for answer in busy]
    assert "ok" in outcomes and "timeout" in outcomes, outcomes
    assert set(outcomes) == {"ok", "timeout"}, "nothing else happens to them"

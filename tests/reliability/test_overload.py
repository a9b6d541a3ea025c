"""Overload meets bounded, per-level queues: fast rejections, priority 1 ahead of
priority 2, timeouts as configured, and every request accounted for on both sides.

Nothing here depends on how fast the machine is: the overload rate is a multiple of the
capacity measured on the server first, backlogs are confirmed by the server's own
pending-request gauge and sized from its measured execution time, and latencies are
compared only where both classes have enough successful requests."""

from __future__ import annotations

import concurrent.futures
import math
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tools.embed import client_module
from tools.reliability.overload import OVERLOAD_FACTOR, overload_rate, run_overload
from tools.serve.local_triton import LocalTriton
from tools.triton_client import metric_total
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

MIN_SAMPLES = 20  # successful requests per class before their latencies are compared
LEVEL2_DEFAULT_TIMEOUT_S = 1.5  # the policy_triton fixture's level-2 default timeout
QUEUE = 16  # the policy_triton fixture's queue bound per level
ROWS, LENGTH = 32, 256  # one backlog request: a full encoder batch of long sequences


def test_overload_is_shed_by_rejection_priority_1_first_and_every_request_is_reconciled(policy_triton) -> None:
    rate, capacity = overload_rate(policy_triton)
    assert rate == pytest.approx(OVERLOAD_FACTOR * capacity, rel=0.01)
    result = run_overload(policy_triton, rate=rate, seconds=5, mix={1: 0.2, 2: 0.8})
    assert result.reconciled, result
    assert set(result.outcomes) <= {"ok", "rejected", "timeout"}, result.outcomes
    assert result.server_failures > 0, "precondition: the server itself shed part of the overload"
    level1, level2 = result.levels
    assert level1.sent + level2.sent == result.sent
    assert level2.rejected > 0, "an overload of the bulk level is rejected, not queued without bound"
    assert level1.ok / level1.sent > level2.ok / level2.sent, "priority 1 keeps a larger share of its requests"
    for level in (level1, level2):
        assert (level.p50_ms is None) == (level.ok == 0), "a level without successes has no latency, and only then"
    if level1.ok >= MIN_SAMPLES and level2.ok >= MIN_SAMPLES:
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


def encoder_waiting(server: LocalTriton) -> int:
    """Requests waiting in the encoder's queues right now (Triton's pending-request gauge)."""
    return int(metric_total(server.client.metrics(), "nv_inference_pending_request_count", model="encoder"))


def poll(condition, attempts: int = 100, interval_s: float = 0.02) -> bool:
    """Whether `condition()` came true within `attempts` polls."""
    for _ in range(attempts):
        if condition():
            return True
        time.sleep(interval_s)
    return False


def encoder_instances(server: LocalTriton) -> int:
    module = client_module("grpc")
    client = module.InferenceServerClient(server.options.grpc_url)
    try:
        config = client.get_model_config("encoder").config
    finally:
        client.close()
    return sum(group.count or 1 for group in config.instance_group) or 1


def backlog_execution_s(server: LocalTriton) -> float:
    """Seconds one backlog request executes on this machine, from the server's statistics
    (the second of two, so the first run of the shape does not count)."""
    call(server.options.grpc_url, 2, None, ROWS, LENGTH)
    before = ModelStats.settled(server.options.http_url, "encoder")
    assert call(server.options.grpc_url, 2, None, ROWS, LENGTH) == "ok"
    delta = ModelStats.settled(server.options.http_url, "encoder") - before
    assert delta.executions == 1, delta
    return delta.compute_ns / 1e9


def with_backlog(server: LocalTriton, probes: list[dict]) -> tuple[list[str], list[str]]:
    """Keep every encoder instance busy with full ROWS x LENGTH batches until the server
    reports a level-2 request waiting in the queue, then send the probe requests."""
    url = server.options.grpc_url
    with concurrent.futures.ThreadPoolExecutor(QUEUE + len(probes)) as pool:
        busy = [pool.submit(call, url, 2, None, ROWS, LENGTH) for _ in range(encoder_instances(server) + 1)]
        while not poll(lambda: encoder_waiting(server) >= 1):
            if len(busy) >= QUEUE:
                pytest.fail(f"no request waited in the encoder's queue behind {len(busy)} backlog requests")
            busy.append(pool.submit(call, url, 2, None, ROWS, LENGTH))
        answers = [pool.submit(call, url, **probe) for probe in probes]
        return [f.result(timeout=600) for f in answers], [f.result(timeout=600) for f in busy]


def test_per_request_timeout_is_honoured_where_overrides_are_allowed(policy_triton) -> None:
    (level2, level1), _ = with_backlog(policy_triton, [{"priority": 2, "timeout_us": 1000}, {"priority": 1, "timeout_us": 1000}])
    assert "timeout" in level2.lower(), level2
    assert level1 == "ok", "level 1 has allow_timeout_override false: the 1 ms timeout is ignored"


def test_default_timeout_rejects_requests_left_waiting_too_long(policy_triton) -> None:
    instances = encoder_instances(policy_triton)
    execution_s = backlog_execution_s(policy_triton)
    # enough queued that the last ones would wait twice the default timeout; the queue holds QUEUE
    queued = min(QUEUE, instances * math.ceil(2 * LEVEL2_DEFAULT_TIMEOUT_S / execution_s))
    longest_wait_s = math.ceil(queued / instances) * execution_s
    assert longest_wait_s > LEVEL2_DEFAULT_TIMEOUT_S, f"precondition: {queued} queued x {execution_s:.2f} s cannot outlast the timeout"
    url = policy_triton.options.grpc_url
    with concurrent.futures.ThreadPoolExecutor(instances + queued) as pool:
        busy = [pool.submit(call, url, 2, None, ROWS, LENGTH) for _ in range(instances + queued)]
        answers = [f.result(timeout=600) for f in busy]
    outcomes = ["ok" if answer == "ok" else "timeout" if "timeout" in answer.lower() else answer for answer in answers]
    assert "ok" in outcomes and "timeout" in outcomes, outcomes
    assert set(outcomes) == {"ok", "timeout"}, "nothing else happens to them"

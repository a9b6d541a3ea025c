"""The simulated dynamic batcher on hand-computed cases: exact batches, start times and outcomes.

One encoder step, a constant cost (every execution takes 10 ms whatever its size), no
per-request overheads and no noise, so each expected batch follows from Triton's rule
by hand."""

from __future__ import annotations

import pytest

from tools.simulate.batcher import DELAY, REJECT, BatcherSpec, QueuePolicy
from tools.simulate.cost_model import CostModel, Grid, Overheads, Stall, StepCost
from tools.simulate.discrete_event import OK, REJECTED, TIMEOUT, SimRequest, Simulation, split_cost
from tools.simulate.live_load import Traffic
from tools.simulate.predict import predict
from tools.simulate.workload import Lengths, Workload

EXECUTION_MS = 10.0


def constant_cost(release_gap_ms: float = 0.0) -> CostModel:
    grid = Grid([1], [1], [[EXECUTION_MS]])
    return CostModel({"encoder": StepCost({1: grid})}, Overheads(0.0, 0.0, 0.0, 0.0), [0.0], Stall(500.0, release_gap_ms))


def run(spec: BatcherSpec, arrivals: list[tuple[float, int, int]], release_gap_ms: float = 0.0, timeout_us: int | None = None):
    """arrivals: (time ms, priority, tokens). Returns (executions as (start, [request indices])), requests)."""
    sim = Simulation(constant_cost(release_gap_ms), [("encoder", spec)], stall=False)
    requests = [SimRequest(i, at, priority, tokens, timeout_us) for i, (at, priority, tokens) in enumerate(arrivals)]
    started: list[tuple[float, list[int]]] = []
    original = sim.start

    def recording_start(now, position, batch):
        started.append((now, [r.index for r in batch]))
        original(now, position, batch)

    sim.start = recording_start
    for request in requests:
        sim.push(request.sent, sim.arrive, request)
    sim.run()
    return started, requests


def at(*times: float, priority: int = 0, tokens: int = 16) -> list[tuple[float, int, int]]:
    return [(t, priority, tokens) for t in times]


def test_preferred_size_reached_before_the_delay_is_sent_at_once():
    spec = BatcherSpec(max_batch_size=8, preferred=(4,), delay_us=100_000)
    started, _ = run(spec, at(0, 1, 2, 3))
    assert started == [(3, [0, 1, 2, 3])]


def test_delay_expiry_sends_what_has_gathered():
    spec = BatcherSpec(max_batch_size=8, preferred=(4,), delay_us=10_000)
    started, requests = run(spec, at(0, 1, 2))
    assert started == [(10, [0, 1, 2])]
    assert [r.done for r in requests] == [20, 20, 20]


def test_delay_zero_sends_the_largest_preferred_size_formed_not_the_whole_queue():
    # 3 wait when the instance frees: preferred 1 is reached, 4 is not -> one request runs alone.
    spec = BatcherSpec(max_batch_size=8, preferred=(1, 4), delay_us=0)
    started, _ = run(spec, at(0, 1, 2, 3))
    assert started == [(0, [0]), (10, [1]), (20, [2]), (30, [3])]


def test_default_batcher_sends_everything_queued_up_to_max_batch_size():
    spec = BatcherSpec(max_batch_size=2, delay_us=0)
    started, _ = run(spec, at(0, 1, 2, 3, 4))
    assert started == [(0, [0]), (10, [1, 2]), (20, [3, 4])]


def test_queue_full_rejects_at_once():
    spec = BatcherSpec(max_batch_size=1, policies={1: QueuePolicy(max_queue_size=2)})
    started, requests = run(spec, at(0, 0.1, 0.2, 0.3))
    assert started == [(0, [0]), (10, [1]), (20, [2])]
    assert [r.outcome for r in requests] == [OK, OK, OK, REJECTED]
    assert requests[3].done == pytest.approx(0.3)


def test_queue_timeout_rejects_when_the_batcher_next_looks_at_the_queue():
    spec = BatcherSpec(max_batch_size=1, policies={1: QueuePolicy(default_timeout_us=5_000, timeout_action=REJECT)})
    started, requests = run(spec, at(0, 1, 12))
    assert started == [(0, [0]), (12, [2])]
    assert [r.outcome for r in requests] == [OK, TIMEOUT, OK]
    assert requests[1].done == 10  # expired at 6 ms, answered when the instance freed at 10 ms


def test_request_timeout_applies_only_below_the_levels_default():
    policy = QueuePolicy(default_timeout_us=50_000, allow_timeout_override=True)
    spec = BatcherSpec(max_batch_size=1, policies={1: policy})
    _, requests = run(spec, at(0, 1), timeout_us=5_000)
    assert [r.outcome for r in requests] == [OK, TIMEOUT]
    _, requests = run(BatcherSpec(max_batch_size=1), at(0, 1), timeout_us=5_000)  # no default: the override is ignored
    assert [r.outcome for r in requests] == [OK, OK]


def test_delay_action_moves_an_expired_request_behind_its_level():
    spec = BatcherSpec(max_batch_size=1, policies={1: QueuePolicy(default_timeout_us=5_000, timeout_action=DELAY)})
    started, requests = run(spec, at(0, 1, 8))
    assert started == [(0, [0]), (10, [2]), (20, [1])]
    assert all(r.outcome == OK for r in requests)


def test_only_equal_shapes_join_unless_inputs_are_ragged():
    arrivals = [(0, 0, 16), (1, 0, 16), (2, 0, 32), (3, 0, 16)]
    padded = BatcherSpec(max_batch_size=8, delay_us=10_000, ragged=False)
    started, _ = run(padded, arrivals)
    assert started == [(2, [0, 1]), (12, [2]), (22, [3])]
    ragged = BatcherSpec(max_batch_size=8, delay_us=10_000, ragged=True)
    started, _ = run(ragged, arrivals)
    assert started == [(10, [0, 1, 2, 3])]


def test_higher_priority_level_runs_first_fifo_within_a_level():
    spec = BatcherSpec(max_batch_size=1, priority_levels=2, default_level=2, priority_queues=True)
    arrivals = [(0, 2, 16), (1, 2, 16), (2, 1, 16), (3, 1, 16)]
    started, _ = run(spec, arrivals)
    assert [batch for _, batch in started] == [[0], [2], [3], [1]]


def test_priority_stall_holds_a_request_that_arrives_during_the_release():
    # One instance, priority queues: request 1 arrives 0.5 ms after request 0's response,
    # before the instance is released (1 ms gap): it waits for the 500 ms idle wait.
    spec = BatcherSpec(max_batch_size=4, priority_levels=2, default_level=2, priority_queues=True)
    sim = Simulation(constant_cost(release_gap_ms=1.0), [("encoder", spec)], stall=None)
    first, second = SimRequest(0, 0.0), SimRequest(1, 10.5)
    for r in (first, second):
        sim.push(r.sent, sim.arrive, r)
    sim.run()
    assert first.done == 10
    assert second.done == pytest.approx(500 + EXECUTION_MS)  # the batcher slept from t=0 (idle) for 500 ms
    sim_off = Simulation(constant_cost(release_gap_ms=1.0), [("encoder", spec)], stall=False)
    again = SimRequest(1, 10.5)
    sim_off.push(0.0, sim_off.arrive, SimRequest(0, 0.0))
    sim_off.push(10.5, sim_off.arrive, again)
    sim_off.run()
    assert again.done == pytest.approx(11 + EXECUTION_MS)


def test_closed_loop_throughput_on_a_constant_cost():
    # 4 clients, 1 instance, 1 ms from response to release: after the first execution all four
    # requests wait at every release, so each 11 ms cycle serves 4 requests.
    spec = BatcherSpec(max_batch_size=32, delay_us=0)
    workload = Workload(Traffic(concurrency=4), requests=2_000, lengths=Lengths("fixed", 16))
    prediction = predict(constant_cost(release_gap_ms=1.0), [("encoder", spec)], workload, stall=False)
    assert prediction.throughput_rps == pytest.approx(4 / 0.011, rel=0.01)
    assert prediction.avg_batch == pytest.approx(4.0, rel=0.01)
    assert prediction.p50_ms == pytest.approx(11.0)


def test_ragged_split_runs_the_cheapest_partition():
    def cost(rows: int, length: int) -> float:
        return 1.0 + rows * length * 0.01

    # 2 short + 1 long: padding all to 200 costs 1 + 6 = 7; splitting costs (1 + 0.4) + (1 + 2) = 4.4
    assert split_cost([20, 20, 200], cost) == pytest.approx(4.4)
    assert split_cost([20, 20], cost) == pytest.approx(1.4)  # equal lengths: one run


def test_response_cache_hits_run_no_step():
    spec = BatcherSpec(max_batch_size=8)
    workload = Workload(Traffic(concurrency=2), requests=200, lengths=Lengths("fixed", 16), cache_hit_rate=1.0)
    prediction = predict(constant_cost(), [("encoder", spec)], workload)
    assert prediction.avg_batch is None  # nothing executed: no value, not 0
    assert prediction.batch_histogram == {}


def test_open_loop_below_capacity_serves_the_offered_rate_in_every_class():
    spec = BatcherSpec(max_batch_size=8, priority_levels=2, default_level=2)
    traffic = Traffic(rate=20.0, distribution="constant", priority_mix={1: 0.5, 2: 0.5})
    prediction = predict(constant_cost(), [("encoder", spec)], Workload(traffic, requests=1_000, lengths=Lengths("fixed", 16)), stall=False)
    assert prediction.throughput_rps == pytest.approx(20.0, rel=0.01)
    assert prediction.p99_ms == pytest.approx(EXECUTION_MS)  # one request every 50 ms never waits
    assert set(prediction.per_priority) == {1, 2}
    assert prediction.avg_batch == 1.0


def test_the_load_generator_thread_spaces_a_closed_loop_out():
    # One client: 10 ms of execution, then 5 ms in the client before its next request.
    cost = constant_cost()
    cost = CostModel(cost.steps, Overheads(0.0, 0.0, 0.0, 0.0, client_ms=5.0), [0.0], cost.stall)
    workload = Workload(Traffic(concurrency=1), requests=500, lengths=Lengths("fixed", 16))
    prediction = predict(cost, [("encoder", BatcherSpec(max_batch_size=8))], workload, stall=False)
    assert prediction.throughput_rps == pytest.approx(1000 / 15, rel=0.01)
    assert prediction.p50_ms == pytest.approx(EXECUTION_MS)


def test_ragged_split_answers_the_short_run_first():
    # cost: 0.2 ms for a 10-token row, 2 ms for a 100-token row, per row: splitting
    # [10, 100] (0.2 + 2.0) beats one run padded to 100 (4.0); the short request leaves first.
    grid = Grid([1, 2], [10, 100], [[0.2, 2.0], [0.4, 4.0]])
    cost = CostModel({"encoder": StepCost({1: grid})}, Overheads(0.0, 0.0, 0.0, 0.0), [0.0], Stall(500.0, 0.0))
    spec = BatcherSpec(max_batch_size=8, delay_us=1_000, ragged=True, ragged_split=True)
    sim = Simulation(cost, [("encoder", spec)], stall=False)
    long, short = SimRequest(0, 0.0, tokens=100), SimRequest(1, 0.5, tokens=10)
    for r in (long, short):
        sim.push(r.sent, sim.arrive, r)
    sim.run()
    assert [e.rows for e in sim.executions] == [2]
    assert short.done == pytest.approx(1.2)
    assert long.done == pytest.approx(3.2)

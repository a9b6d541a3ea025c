"""The load driver against a fake sender (no server): schedules, concurrency, phases, mixes,
timeouts, and the statistics of its records. Nothing depends on the machine's speed: the
fake sender answers when the test lets it, and counts are checked against seeded schedules."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.unit import fake_tritonclient
from tools.load import ClosedLoop, Constant, LoadDriver, Phase, Poisson, Prepared, Request, RequestMix, Results, Trace, arrivals, drive
from tools.load.outcomes import CLIENT_TIMEOUT, ERROR, OK, REJECTED, TIMEOUT, UNAVAILABLE, classify
from tools.load.results import LatencySummary, percentile
from tools.load.schedules import Bursty


class FakeSender:
    """Answers at once (or as `behaviour(request)` says) and counts requests in flight."""

    def __init__(self, behaviour=None) -> None:
        self.behaviour = behaviour
        self.in_flight = 0
        self.max_in_flight = 0
        self.opened = self.closed = False
        self.sent: list[Request] = []

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True

    def prepare(self, request: Request) -> Prepared:
        return Prepared(request, f"model-{request.kind}", rows=2, tokens=10 + request.index % 3, label="")

    async def send(self, prepared: Prepared) -> None:
        self.sent.append(prepared.request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # let the other clients run: a real overlap
            if self.behaviour:
                await self.behaviour(prepared.request)
        finally:
            self.in_flight -= 1


class Shed(Exception):
    pass


def test_percentile_returns_none_without_samples_and_numpy_values_with_them() -> None:
    assert percentile([], 99) is None
    assert percentile(np.array([]), 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile(range(101), 99) == pytest.approx(99.0)
    assert percentile([7.0], 90) == 7.0


def test_latency_summary_is_in_milliseconds_and_empty_without_samples() -> None:
    summary = LatencySummary.of(np.linspace(0.001, 0.100, 100))
    assert summary.p50_ms == pytest.approx(50.5, abs=0.6)
    assert summary.max_ms == pytest.approx(100.0)
    assert LatencySummary.of([]) == LatencySummary(0, None, None, None, None, None, None)


def test_poisson_arrivals_have_the_asked_rate_and_exponential_gaps() -> None:
    offsets = Poisson(200).offsets(60.0, np.random.default_rng(3))
    gaps = np.diff(offsets)
    assert len(offsets) == pytest.approx(12_000, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: cv = 1


def test_the_same_seed_gives_the_same_arrivals() -> None:
    phases = [Phase(Poisson(50), 2.0), Phase(Poisson(5), 2.0)]
    np.testing.assert_array_equal(arrivals(phases, seed=4), arrivals(phases, seed=4))
    assert not np.array_equal(arrivals(phases, seed=4), arrivals(phases, seed=5))


def test_constant_arrivals_are_evenly_spaced() -> None:
    gaps = np.diff(Constant(50).offsets(2.0, np.random.default_rng(0)))
    np.testing.assert_allclose(gaps, 0.02)


def test_bursty_arrivals_alternate_low_and_high_rates() -> None:
    offsets = Bursty(20, 200, 2.0).offsets(40.0, np.random.default_rng(1))
    in_burst = (offsets % 2.0) >= 1.0
    assert in_burst.sum() / (~in_burst).sum() == pytest.approx(10, rel=0.2)


def test_a_trace_is_replayed_and_cycled_or_sent_once() -> None:
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(Trace((0.0, 0.5, 0.75, 1.0)).offsets(2.5, rng), [0.0, 0.5, 0.75, 1.0, 1.0, 1.5, 1.75, 2.0, 2.0])
    np.testing.assert_allclose(Trace((0.0, 0.5, 1.0), cycle=False).offsets(5.0, rng), [0.0, 0.5, 1.0])


def test_phases_shift_their_arrivals_and_closed_loop_phases_add_none() -> None:
    phases = [Phase(Constant(10), 1.0), Phase(ClosedLoop(2), 1.0), Phase(Constant(2), 2.0)]
    offsets = arrivals(phases)
    assert len(offsets[offsets < 1.0]) == 9 and not len(offsets[(offsets >= 1.0) & (offsets < 2.0)])
    np.testing.assert_allclose(offsets[offsets >= 2.0], [2.5, 3.0, 3.5])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ClosedLoop(0), "at least 1 client"),
        (lambda: Poisson(0), "above 0 req/s"),
        (lambda: Bursty(1, 2, 0), "period"),
        (lambda: Trace(()), "at least one"),
        (lambda: Phase(Poisson(1), 0), "above 0 s"),
        (lambda: RequestMix(priorities={1: 0.5}), "add up to 1"),
        (lambda: RequestMix(timeout_us=-1), "negative"),
    ],
)
def test_bad_schedules_and_mixes_are_refused(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_mixes_are_drawn_in_their_shares_and_reproducibly() -> None:
    mix = RequestMix(kinds={"a": 0.25, "b": 0.75}, priorities={1: 0.2, 2: 0.8}, timeout_us=500, seed=3)
    first, again = mix.requests(), mix.requests()
    requests = [first(i) for i in range(10_000)]
    assert [again(i) for i in range(10_000)] == requests
    assert np.mean([r.kind == "a" for r in requests]) == pytest.approx(0.25, abs=0.02)
    assert np.mean([r.priority == 1 for r in requests]) == pytest.approx(0.2, abs=0.02)
    assert {r.timeout_us for r in requests} == {500}
    plain = RequestMix().requests()(7)
    assert (plain.kind, plain.priority, plain.timeout_us) == ("default", 0, None)


def test_an_open_loop_sends_every_scheduled_arrival_once_in_order() -> None:
    sender = FakeSender()
    run = drive(sender, [Phase(Trace((0.0, 0.01, 0.02, 0.03, 0.04), cycle=False), 0.05)])
    assert run.sent == len(run.records) == 5
    assert sorted(r.index for r in run.records) == [0, 1, 2, 3, 4]
    assert [r.scheduled_s for r in sorted(run.records, key=lambda r: r.index)] == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])
    assert all(r.outcome == OK and r.sent_s >= r.scheduled_s for r in run.records)
    assert sender.opened and sender.closed


def test_a_closed_loop_never_exceeds_its_concurrency() -> None:
    sender = FakeSender()
    run = drive(sender, [Phase(ClosedLoop(3), 0.2)])
    assert sender.max_in_flight == 3
    assert run.sent == len(run.records) > 3
    assert all(r.scheduled_s is None for r in run.records)


def test_phases_run_in_turn_and_each_record_knows_its_phase() -> None:
    sender = FakeSender()
    phases = [Phase(ClosedLoop(2), 0.1), Phase(Trace((0.0, 0.02), cycle=False), 0.05), Phase(ClosedLoop(1), 0.1)]
    run = drive(sender, phases)
    by_phase = [[r for r in run.records if r.phase == p] for p in range(3)]
    assert len(by_phase[1]) == 2 and all(by_phase)
    assert max(r.done_s for r in by_phase[0]) <= min(r.sent_s for r in by_phase[1])  # a closed loop ends before the next phase
    assert max(r.sent_s for r in by_phase[1]) <= min(r.sent_s for r in by_phase[2])
    assert sender.max_in_flight <= 2


def test_kinds_and_priorities_reach_the_sender_and_the_records() -> None:
    sender = FakeSender()
    mix = RequestMix(kinds={"texts": 0.5, "ids": 0.5}, priorities={1: 0.5, 2: 0.5}, seed=1)
    run = drive(sender, [Phase(Trace(tuple(np.linspace(0, 0.05, 40)), cycle=False), 0.06)], mix)
    drawn = mix.requests()
    for record in run.records:
        assert (record.kind, record.priority) == (drawn(record.index).kind, drawn(record.index).priority)
        assert record.model == f"model-{record.kind}"
    results = run.results()
    assert set(results.per_kind) == {"texts", "ids"} and set(results.per_priority) == {1, 2}
    assert sum(c.sent for c in results.per_kind.values()) == results.sent == 40


def test_a_request_past_its_deadline_is_recorded_as_a_client_timeout() -> None:
    async def hang_on_odd(request: Request) -> None:
        if request.index % 2:
            await asyncio.Event().wait()  # never answers

    run = drive(FakeSender(hang_on_odd), [Phase(Trace((0.0, 0.0, 0.0, 0.0), cycle=False), 0.01)], deadline_s=0.05)
    outcomes = {r.index: r.outcome for r in run.records}
    assert outcomes == {0: OK, 1: CLIENT_TIMEOUT, 2: OK, 3: CLIENT_TIMEOUT}
    assert all(r.latency_s >= 0.05 for r in run.records if r.outcome == CLIENT_TIMEOUT)


def test_failures_are_classified_and_recorded_with_their_message() -> None:
    messages = ["in ensemble 'embed', Exceeds maximum queue size", "Request timeout expired", "unexpected output", ""]

    async def fail(request: Request) -> None:
        if request.index < len(messages):
            raise Shed(messages[request.index])

    run = drive(FakeSender(fail), [Phase(Trace((0.0,) * 5, cycle=False), 0.01)])
    by_index = {r.index: r for r in run.records}
    assert [by_index[i].outcome for i in range(5)] == [REJECTED, TIMEOUT, ERROR, ERROR, OK]
    assert by_index[0].message == messages[0] and by_index[3].message == "Shed"
    assert run.results().outcomes == {REJECTED: 1, TIMEOUT: 1, ERROR: 2, OK: 1}


def test_the_engine_stops_when_asked_and_every_request_sent_has_a_record() -> None:
    async def main():
        sender = FakeSender()
        engine = LoadDriver(sender, [Phase(ClosedLoop(2), 60.0)])
        stop = asyncio.Event()
        task = asyncio.create_task(engine.run(stop))
        await engine.ready.wait()
        while len(engine.records) < 10:
            await asyncio.sleep(0)
        stop.set()
        return await task

    run = asyncio.run(main())
    assert run.sent == len(run.records) >= 10 and run.seconds < 60.0


@pytest.mark.parametrize(
    "message, outcome",
    [
        ("[StatusCode.UNAVAILABLE] Exceeds maximum queue size", REJECTED),
        ("Request timeout expired", TIMEOUT),
        ("[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded", CLIENT_TIMEOUT),
        ("ConnectionRefusedError: [Errno 111] Connect call failed", UNAVAILABLE),
        ("in ensemble 'embed', onnx runtime error", ERROR),
    ],
)
def test_one_classification_for_triton_and_client_messages(message: str, outcome: str) -> None:
    assert classify(message) == outcome


class R:
    """A record as the statistics see it."""

    def __init__(self, latency_s: float, outcome: str = OK, priority: int = 0, kind: str = "default", rows: int = 1, tokens=None, label=""):
        self.latency_s, self.outcome, self.priority, self.kind, self.rows, self.tokens, self.label = (
            latency_s,
            outcome,
            priority,
            kind,
            rows,
            tokens,
            label,
        )


def test_results_count_outcomes_throughput_and_latency_of_successes_only() -> None:
    records = [R(0.010, rows=2), R(0.020, rows=2), R(0.030, rows=2), R(0.001, REJECTED, rows=2)]
    results = Results.of(records, seconds=2.0)
    assert (results.sent, results.outcomes, results.failed) == (4, {OK: 3, REJECTED: 1}, 1)
    assert results.throughput_rps == pytest.approx(1.5) and results.rows_per_s == pytest.approx(3.0)
    assert results.latency.p50_ms == pytest.approx(20.0) and results.latency.count == 3
    assert results.useful_tokens_per_s is None and results.per_label == {}


def test_a_class_without_successful_requests_has_no_latency() -> None:
    records = [R(0.010, priority=1, kind="texts"), R(0.002, REJECTED, priority=2, kind="ids"), R(0.003, TIMEOUT, priority=2, kind="ids")]
    results = Results.of(records, seconds=1.0)
    bulk = results.per_priority[2]
    assert (bulk.sent, bulk.outcomes, bulk.throughput_rps) == (2, {REJECTED: 1, TIMEOUT: 1}, 0.0)
    assert bulk.latency == LatencySummary() and bulk.latency.p99_ms is None
    assert results.per_kind["ids"].latency.p50_ms is None
    assert results.per_priority[1].latency.p50_ms == pytest.approx(10.0)
    nothing = Results.of([], seconds=1.0)
    assert nothing.latency.p99_ms is None and nothing.per_priority == {} and nothing.sent == 0


def test_labels_and_tokens_give_per_label_results_and_useful_tokens() -> None:
    records = [R(0.01, tokens=10, label="short"), R(0.05, tokens=200, label="long"), R(0.01, ERROR, tokens=10, label="short")]
    results = Results.of(records, seconds=2.0)
    assert set(results.per_label) == {"short", "long"}
    assert results.useful_tokens_per_s == pytest.approx(105.0)


def test_run_results_select_requests_by_send_time() -> None:
    run = drive(FakeSender(), [Phase(Trace((0.0, 0.02, 0.04, 0.06), cycle=False), 0.08)])
    window = run.results(0.03, 0.08)
    assert window.sent == 2 and window.seconds == pytest.approx(0.05)
    assert run.results().sent == 4


ENCODER = {
    "name": "encoder",
    "input": [{"name": "INPUT_IDS", "data_type": "TYPE_INT64"}, {"name": "ATTENTION_MASK", "data_type": "TYPE_INT64"}],
    "output": [{"name": "EMBEDDING", "data_type": "TYPE_FP32"}],
}
ENSEMBLE = {
    "name": "my-texts",
    "platform": "ensemble",
    "input": [{"name": "TEXT", "data_type": "TYPE_STRING"}],
    "output": [{"name": "EMBEDDING", "data_type": "TYPE_FP32"}],
    "ensemble_scheduling": {"step": [{"model_name": "tokenizer"}, {"model_name": "encoder"}]},
}


def test_the_served_config_decides_texts_or_token_ids_whatever_the_name() -> None:
    from tools.load.requests import TEXTS, TOKEN_IDS, RequestSettings, input_kind, request_factory, served_models

    assert input_kind(ENCODER | {"name": "embed"}) == TOKEN_IDS
    assert input_kind(ENSEMBLE | {"name": "encoder-like"}) == TEXTS
    ids = request_factory(ENCODER | {"name": "anything"}, RequestSettings(seq_len=16))
    assert (ids.model, ids.inputs, ids.extra) == ("anything", ("INPUT_IDS", "ATTENTION_MASK"), {"sequence_length": 16})
    texts = request_factory(ENSEMBLE, RequestSettings(texts_per_request=3))
    assert (texts.model, texts.inputs, texts.rows_per_request) == ("my-texts", ("TEXT",), 3)
    assert served_models(ENSEMBLE) == ("my-texts", "tokenizer", "encoder") and served_models(ENCODER) == ("encoder",)
    with pytest.raises(ValueError, match="neither texts"):
        input_kind({"name": "image", "input": [{"name": "PIXELS", "data_type": "TYPE_FP32"}]})


def test_a_config_protobuf_works_as_well_as_the_json_one() -> None:
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    from tools.load.requests import TOKEN_IDS, input_kind

    config = json_format.ParseDict({k: v for k, v in ENCODER.items()}, model_config_pb2.ModelConfig())
    assert input_kind(config) == TOKEN_IDS


def test_a_counted_closed_loop_sends_exactly_its_requests_then_ends() -> None:
    sender = FakeSender()
    phases = [Phase(ClosedLoop(3, requests=7), 600.0), Phase(ClosedLoop(1, requests=2), 600.0), Phase(Trace((0.0,), cycle=False), 0.01)]
    run = drive(sender, phases)
    assert [sum(1 for r in run.records if r.phase == p) for p in (0, 1, 2)] == [7, 2, 1]
    assert run.seconds < 600.0 and sender.max_in_flight <= 3


def test_the_triton_sender_builds_each_kinds_request_and_a_target_may_fix_its_priority() -> None:
    from tools.load.requests import embed_target, encoder_target
    from tools.load.triton import TritonSender

    bulk = embed_target(texts_per_request=2)
    bulk.priority, bulk.timeout_us = 2, 1000
    sender = TritonSender("127.0.0.1:1", {"texts": bulk, "ids": encoder_target(8)})
    sender.module = fake_tritonclient
    texts = sender.prepare(Request(0, "texts", priority=1))
    (tensor,), _outputs = texts.payload
    assert (texts.model, texts.rows, tensor.name, tensor.shape) == ("embed", 2, "TEXT", [2, 1])
    assert (texts.request.priority, texts.request.timeout_us) == (2, 1000)
    ids = sender.prepare(Request(1, "ids", priority=1))
    assert [t.name for t in ids.payload[0]] == ["INPUT_IDS", "ATTENTION_MASK"] and ids.payload[0][0].shape == [1, 8]
    assert ids.request.priority == 1 and [o.name for o in ids.payload[1]] == ["EMBEDDING"]


def test_the_record_keeps_what_the_sender_fixed() -> None:
    class Fixing(FakeSender):
        def prepare(self, request: Request) -> Prepared:
            prepared = super().prepare(request)
            prepared.request = Request(request.index, request.kind, 3)
            return prepared

    run = drive(Fixing(), [Phase(Trace((0.0, 0.0), cycle=False), 0.01)])
    assert {r.priority for r in run.records} == {3}

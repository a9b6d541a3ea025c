"""Queue deadlines (`queue_timeout_ms`): a request not scheduled in time fails fast and clearly;
one that was scheduled (even if preempted later) never expires."""

from __future__ import annotations

from llm.contract import GenerationRequest, SamplingParams, SchedulerConfig
from llm.scheduler import Request, RequestStatus, Scheduler
from tests.unit.test_llm_loop import make_loop, request


def waiting_seq(seq_id: int, arrival: float, timeout_ms: float | None) -> Request:
    params = SamplingParams(max_tokens=4, queue_timeout_ms=timeout_ms)
    return Request.from_request(seq_id, GenerationRequest(f"r{seq_id}", [1, 2, 3], params, arrival))


def test_only_never_scheduled_requests_past_their_deadline_expire() -> None:
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=8), block_size=4, num_blocks=16, max_model_len=64)
    running = waiting_seq(0, arrival=0.0, timeout_ms=10)
    scheduler.add(running)
    scheduler.schedule(0.0)  # scheduled at once: it never expires
    late = waiting_seq(1, arrival=0.0, timeout_ms=50)
    patient = waiting_seq(2, arrival=0.0, timeout_ms=None)
    later = waiting_seq(3, arrival=0.02, timeout_ms=50)
    for seq in (late, patient, later):
        scheduler.add(seq)
    assert scheduler.expire(0.049) == []
    assert scheduler.expire(0.050) == [late]
    assert list(scheduler.waiting) == [patient, later] and running.status is RequestStatus.RUNNING
    assert scheduler.expire(10.0) == [later]
    assert list(scheduler.waiting) == [patient]


def test_a_preempted_request_does_not_expire_while_it_waits_again() -> None:
    scheduler = Scheduler(
        SchedulerConfig(policy="priority", max_num_seqs=1, max_num_batched_tokens=8), block_size=4, num_blocks=16, max_model_len=64
    )
    batch = waiting_seq(0, arrival=0.0, timeout_ms=10)
    scheduler.add(batch)
    scheduler.schedule(0.0)
    urgent = Request.from_request(1, GenerationRequest("u", [1], SamplingParams(max_tokens=4, priority=-1), 0.001))
    scheduler.add(urgent)
    plan = scheduler.schedule(0.001)
    assert plan.preempted == (batch,) and batch.status is RequestStatus.WAITING
    assert scheduler.expire(5.0) == []


def test_the_loop_fails_an_expired_request_with_a_timeout_naming_the_knob_and_serves_the_rest() -> None:
    loop, _, recorder, clock = make_loop(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=8))
    recorder.expected = 3
    loop.submit(request("busy", [1, 2], at=clock.now, max_tokens=50), recorder.callback)
    loop.run_one_step()
    loop.submit(request("hurried", [3], at=clock.now, max_tokens=2, queue_timeout_ms=20), recorder.callback)
    loop.submit(request("patient", [4], at=clock.now, max_tokens=2), recorder.callback)
    for _ in range(200):
        loop.run_one_step()
        if recorder.done.is_set():
            break
    hurried = recorder.final("hurried")
    assert hurried.finish_reason == "timeout" and "queue_timeout_ms=20" in hurried.error
    assert recorder.tokens("hurried") == []
    assert recorder.final("patient").finish_reason == "length" and recorder.final("busy").finish_reason == "length"
    assert [t.finish_reason for t in recorder.timings if t.request_id == "hurried"] == ["timeout"]
    assert loop.snapshot()["kv_blocks_used"] == 0

"""The distributed master's wait for its workers' last calls (loadtest/final_reports.py), with
workers played by greenlets; the real exchange runs in tests/integration/test_locust_distributed.py."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import gevent

from loadtest import final_reports
from loadtest.final_reports import CALLS_FINISHED, FINISH_CALLS, FinalReports


@dataclass(frozen=True)
class Worker:
    id: str


@dataclass
class Clients:
    all: list[Worker]
    missing: list[Worker] = field(default_factory=list)


class Master:
    """Delivers each FINISH_CALLS to a worker that answers after its delay (None: never)."""

    def __init__(self, delays_s: dict[str, float | None], missing: tuple[str, ...] = (), stop_timeout: float = 0.0) -> None:
        workers = [Worker(name) for name in delays_s]
        self.clients = Clients(workers, [worker for worker in workers if worker.id in missing])
        self.environment = SimpleNamespace(stop_timeout=stop_timeout)
        self.delays_s = delays_s
        self.sent: list[tuple[str, str | None]] = []
        self.reports = FinalReports(self)  # type: ignore[arg-type]

    def send_message(self, msg_type: str, data: object = None, client_id: str | None = None) -> None:
        self.sent.append((msg_type, client_id))
        delay = self.delays_s[client_id or ""]
        if delay is not None:
            gevent.spawn(self._answer, client_id, time.monotonic() + delay)

    def _answer(self, client_id: str | None, due: float) -> None:
        # By the clock, not a gevent timer: the hub's cached time can lag in a long test run.
        while time.monotonic() < due:
            gevent.sleep(0.01)
        self.reports.finished(msg=SimpleNamespace(type=CALLS_FINISHED, node_id=client_id))


def test_the_master_goes_on_once_every_worker_has_reported_its_last_calls(monkeypatch) -> None:
    monkeypatch.setattr(final_reports, "REPLY_MARGIN_S", 60.0)
    master = Master({"a": 0.05, "b": 0.3})
    started = time.monotonic()
    master.reports.collect()
    waited = time.monotonic() - started
    assert sorted(master.sent) == [(FINISH_CALLS, "a"), (FINISH_CALLS, "b")]
    assert 0.3 <= waited < 30.0  # the slower worker's answer, not the deadline (stop timeout + margin)
    assert master.reports.waiting == set()


def test_a_missing_worker_is_not_asked_and_not_waited_for() -> None:
    master = Master({"a": 0.05, "gone": None}, missing=("gone",), stop_timeout=60.0)
    started = time.monotonic()
    master.reports.collect()
    assert master.sent == [(FINISH_CALLS, "a")]
    assert time.monotonic() - started < 30.0  # not the deadline (60 s and the margin)


def test_a_silent_worker_is_named_once_the_stop_timeout_and_margin_have_passed(monkeypatch, caplog) -> None:
    monkeypatch.setattr(final_reports, "REPLY_MARGIN_S", 0.2)
    master = Master({"a": 0.05, "silent": None}, stop_timeout=0.3)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=final_reports.__name__):
        master.reports.collect()
    assert 0.5 <= time.monotonic() - started < 10.0  # the deadline: stop timeout + margin
    assert master.reports.waiting == {"silent"}
    assert "silent" in caplog.text and "'a'" not in caplog.text


def test_no_workers_no_wait() -> None:
    master = Master({})
    master.reports.collect()
    assert master.sent == []

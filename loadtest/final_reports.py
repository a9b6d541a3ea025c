"""A distributed run's master waits for every worker's last calls before it stops counting.

Locust's headless master ends a run by sending `quit` to its workers and then waits a fixed
0.5 s for their final stats report before it stops listening. Our users finish the call they
have in flight when a run ends (`options.graceful_stop_timeout`), so a worker reports those
calls only once they return: a call slower than 0.5 s (bulk requests on a busy machine) and
the worker's whole last report interval (up to 3 s of requests) never reach the master's
counters, its CSV reports or its verdict. Stop 42's CI saw the server answer 150 requests
while the master counted 133.

Here the master, as it begins to stop (`test_stopping`), asks each worker to stop its users;
a worker waits for their calls, sends its stats report and then says it has finished. The
master goes on once every worker has said so (their reports arrive first: one connection keeps
the order), or after the stop timeout and a margin, naming the workers that stayed silent.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import gevent

if TYPE_CHECKING:  # importing locust patches the standard library with gevent's (see install)
    from locust.env import Environment
    from locust.rpc import Message
    from locust.runners import MasterRunner

FINISH_CALLS = "finish_calls"
CALLS_FINISHED = "calls_finished"
# Beyond the stop timeout (the longest a user may finish its call): the time a worker needs to
# stop its users, report and answer over loopback.
REPLY_MARGIN_S = 10.0

logger = logging.getLogger(__name__)


def install(environment: Environment) -> None:
    """Registers both ends of the exchange on the runner this process has (none when local).
    Locust is imported here, by the locustfile's process, which has already imported it."""
    from locust.runners import MasterRunner, WorkerRunner

    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message(FINISH_CALLS, _finish_calls, concurrent=True)
    elif isinstance(runner, MasterRunner):
        collector = FinalReports(runner)
        runner.register_message(CALLS_FINISHED, collector.finished)
        environment.events.test_stopping.add_listener(collector.collect)


def _finish_calls(environment: Environment, msg: Message, **_: Any) -> None:
    """On a worker: stop the users (each finishes its call), report, then answer the master."""
    runner = environment.runner
    runner.stop()
    report: dict[str, Any] = {}
    environment.events.report_to_master.fire(client_id=runner.client_id, data=report)
    runner.send_message("stats", report)
    runner.send_message(CALLS_FINISHED)


class FinalReports:
    """On the master: which workers have sent the report of their last calls."""

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        self.waiting: set[str] = set()

    def finished(self, msg: Message, **_: Any) -> None:
        self.waiting.discard(msg.node_id)

    def collect(self, **_: Any) -> None:
        """Blocks the stopping master (other greenlets, its listener among them, go on) until
        every connected worker has reported its last calls or the deadline has passed."""
        workers = [worker.id for worker in self.runner.clients.all if worker not in self.runner.clients.missing]
        if not workers:
            return
        self.waiting = set(workers)
        for worker in workers:
            self.runner.send_message(FINISH_CALLS, client_id=worker)
        deadline = time.monotonic() + float(self.runner.environment.stop_timeout or 0.0) + REPLY_MARGIN_S
        while self.waiting and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if self.waiting:
            logger.warning("No final report from worker(s) %s: their last calls may be missing from the counts", sorted(self.waiting))

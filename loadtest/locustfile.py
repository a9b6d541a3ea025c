"""Locust load test for the `embed` ensemble on Triton (HTTP and gRPC).

Headless, bounded, with reports and an SLO verdict:  make loadtest
Web UI (with a server from `make serve`):             .venv/bin/locust -f loadtest/locustfile.py
Options: `python -m loadtest.run --help` lists them (locust's own --help does not show custom options).
"""

from __future__ import annotations

# gRPC's C core blocks gevent's loop unless told to cooperate; this must run before the
# first channel exists. tritonclient.http needs nothing (it is built on geventhttpclient).
import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()

from locust import events  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from loadtest import final_reports  # noqa: E402
from loadtest.latency import SuccessLatency  # noqa: E402
from loadtest.options import add_load_options, graceful_stop_timeout  # noqa: E402
from loadtest.shapes import SelectedShape  # noqa: E402, F401 - locust picks the shape up from this module
from loadtest.users import (  # noqa: E402, F401 - locust picks the user classes up from this module
    BulkGrpcUser,
    BulkHttpUser,
    InteractiveGrpcUser,
    InteractiveHttpUser,
    apply_weights,
)

success_latency = SuccessLatency()


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:
    add_load_options(parser)


REPORT_KEY = "success_latency"


@events.init.add_listener
def _on_init(environment, **_) -> None:
    environment.events.request.add_listener(success_latency.record)
    environment.events.reset_stats.add_listener(success_latency.clear)
    # Distributed: workers pass their samples to the master with locust's stats reports.
    if isinstance(environment.runner, WorkerRunner):
        environment.events.report_to_master.add_listener(lambda data, **_: data.__setitem__(REPORT_KEY, success_latency.take_report()))
    elif isinstance(environment.runner, MasterRunner):
        environment.events.worker_report.add_listener(lambda data, **_: success_latency.merge_report(data.get(REPORT_KEY, [])))
    # The master waits for every worker's last calls before it stops counting.
    final_reports.install(environment)
    # A worker that missed that wait may still report as it quits: write again at the very end.
    environment.events.quit.add_listener(lambda **_: _write(environment))
    environment.stop_timeout = graceful_stop_timeout(environment.stop_timeout, float(environment.parsed_options.client_timeout_s))


@events.test_start.add_listener
def _on_test_start(environment, **_) -> None:
    options = environment.parsed_options
    apply_weights(int(options.interactive_weight), int(options.bulk_weight))
    success_latency.clear()


@events.test_stop.add_listener
def _on_test_stop(environment, **_) -> None:
    _write(environment)


def _write(environment) -> None:
    """Only the process that writes locust's CSV reports writes ours (never a worker)."""
    prefix = getattr(environment.parsed_options, "csv_prefix", None)
    if prefix and not isinstance(environment.runner, WorkerRunner):
        success_latency.write(prefix)

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

from loadtest.latency import SuccessLatency  # noqa: E402
from loadtest.options import add_load_options  # noqa: E402
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


@events.init.add_listener
def _on_init(environment, **_) -> None:
    environment.events.request.add_listener(success_latency.record)
    environment.events.reset_stats.add_listener(success_latency.clear)


@events.test_start.add_listener
def _on_test_start(environment, **_) -> None:
    options = environment.parsed_options
    apply_weights(int(options.interactive_weight), int(options.bulk_weight))
    success_latency.clear()


@events.test_stop.add_listener
def _on_test_stop(environment, **_) -> None:
    prefix = getattr(environment.parsed_options, "csv_prefix", None)
    if prefix:
        success_latency.write(prefix)

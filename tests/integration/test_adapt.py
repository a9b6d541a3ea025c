"""The adaptive controller on the real local Triton (explicit model control, admin key)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tools.adapt import __main__ as adapt
from tools.adapt.live import with_delay
from tools.adapt.replay import TracePhase, phase_trace, replay
from tools.load.outcomes import OK
from tools.load.requests import encoder_target
from tools.loadgen.curve import encoder_batch, measure_curve
from tools.serve.local_triton import ServerOptions, triton_client
from tools.triton_client import TritonClient

pytestmark = pytest.mark.integration

KEY = "adapt-integration-key"
START_DELAY_US = 16_000


@pytest.fixture(scope="module")
def explicit_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerOptions]:
    server = start_triton(tmp_path_factory.mktemp("adapt") / "triton.log", model_control_mode="explicit", load_models=("*",), admin_key=KEY)
    try:
        yield server.options
    finally:
        server.stop()


def _set_delay(options: ServerOptions, delay_us: int) -> None:
    client = triton_client(options.http_url, KEY)
    client.load("encoder", with_delay(client.config("encoder"), delay_us))


def _controller_args(options: ServerOptions, seconds: float, *extra: str) -> list[str]:
    return [
        "--model",
        "encoder",
        "--p99-ms",
        "150",
        "--url",
        options.http_url,
        "--grpc-url",
        options.grpc_url,
        "--admin-key",
        KEY,
        "--duration",
        str(seconds),
        "--window",
        "2",
        "--min-interval",
        "4",
        "--batching-gain",
        "1.2",
        "-q",
        *extra,
    ]


def light_rate(options: ServerOptions) -> float:
    """A quarter of the encoder's batch-1 capacity, measured on this server now (as
    `tools.adapt.evaluate` derives its low phase): light on any machine."""
    (point,) = measure_curve(options.http_url, "encoder", encoder_batch(32), [1], repeats=4)
    instances = sum(group.count or 1 for group in TritonClient(options.http_url).config("encoder").instance_group)
    return 0.25 * point.rows_per_s * instances


def test_light_traffic_makes_the_controller_cut_a_long_delay_without_failing_a_request(explicit_triton, tmp_path) -> None:
    _set_delay(explicit_triton, START_DELAY_US)
    arrivals = phase_trace([TracePhase("light", light_rate(explicit_triton), 20.0)], seed=3)
    outcome: dict = {}

    def load() -> None:
        outcome["records"] = replay(encoder_target(32), arrivals, explicit_triton.grpc_url)

    sender = threading.Thread(target=load)
    sender.start()
    decisions = tmp_path / "decisions.json"
    code = adapt.run(_controller_args(explicit_triton, 18, "--decisions-json", str(decisions)))
    sender.join()

    assert code == 0
    document = json.loads(decisions.read_text())
    changes = [d for d in document["decisions"] if d["changed"]]
    assert changes, "at least one change under light traffic"
    first = changes[0]
    assert first["direction"] == "down" and first["before_us"] == START_DELAY_US and first["after_us"] < START_DELAY_US
    assert "latency" in first["reason"] and first["figures"]["busy"] <= 0.5  # justified: the instance was mostly idle
    assert document["reloads"] and all(r["ok"] for r in document["reloads"])
    served = TritonClient(explicit_triton.http_url).config("encoder")
    assert served.dynamic_batching.max_queue_delay_microseconds == document["final_delay_us"] < START_DELAY_US
    assert served.dynamic_batching.priority_levels == 2, "only the delay changes"
    records = outcome["records"].records
    assert len(records) == len(arrivals)
    assert {r.outcome for r in records} == {OK}, "no request failed, also during the reloads"


def test_a_dry_run_decides_but_reloads_nothing(explicit_triton, tmp_path) -> None:
    _set_delay(explicit_triton, START_DELAY_US)
    decisions = tmp_path / "dry.json"
    code = adapt.run(_controller_args(explicit_triton, 7, "--dry-run", "--decisions-json", str(decisions)))
    assert code == 0
    document = json.loads(decisions.read_text())
    assert document["dry_run"] and not document["reloads"]
    assert any(d["changed"] for d in document["decisions"]), "an idle server: it would cut the delay"
    assert TritonClient(explicit_triton.http_url).config("encoder").dynamic_batching.max_queue_delay_microseconds == START_DELAY_US
    assert document["final_delay_us"] == START_DELAY_US != document["law_final_delay_us"]


def test_a_dry_run_says_the_delay_is_unchanged(explicit_triton, capsys) -> None:
    _set_delay(explicit_triton, START_DELAY_US)
    assert adapt.run(_controller_args(explicit_triton, 7, "--dry-run")) == 0
    summary = capsys.readouterr().out
    assert f"delay unchanged at {START_DELAY_US} us" in summary and "delay now" not in summary


def test_a_server_without_explicit_model_control_is_refused_before_anything_runs(triton, caplog) -> None:
    args = ["--model", "encoder", "--p99-ms", "150", "--url", triton.http_url, "--grpc-url", triton.grpc_url, "--duration", "60"]
    code = adapt.run(args)  # no --batching-gain: a refusal after the gain measurement would log it first
    assert code == 2
    assert "not in explicit model-control mode" in caplog.text and "--model-control-mode explicit" in caplog.text
    assert "batching gain" not in caplog.text and "polling is enabled" not in caplog.text


def test_a_dry_run_watches_a_server_without_model_control(triton, caplog, capsys) -> None:
    args = [
        "--model",
        "encoder",
        "--p99-ms",
        "150",
        "--url",
        triton.http_url,
        "--grpc-url",
        triton.grpc_url,
        "--duration",
        "5",
        "--window",
        "2",
        "--batching-gain",
        "1.2",
        "--dry-run",
    ]
    assert adapt.run(args) == 0
    assert "dry run: the server at" in caplog.text
    delay = TritonClient(triton.http_url).config("encoder").dynamic_batching.max_queue_delay_microseconds
    assert f"delay unchanged at {delay} us" in capsys.readouterr().out

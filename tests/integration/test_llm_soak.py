"""The LLM soak (tools/reliability/llm/soak.py) for about 40 s against the real Triton serving
`llm` (with the soak's small scheduler bounds, as a config override) and the real gateway process:
its verdict passes, and each of its checks had something to check (answers on all three paths,
clients that left, bad requests, a burst refused on both bounds, aborts counted by the model)."""

from __future__ import annotations

import pytest

from tests.conftest import start_gateway
from tools.contract import LLM_MODEL
from tools.reliability.llm.soak import LlmSoakReport, SoakSettings, Targets, run_llm_soak, soak_config, write_report
from tools.reliability.llm.traffic import CANCELLED, ERROR, OK, REJECTED

pytestmark = pytest.mark.integration

SETTINGS = SoakSettings(duration_s=40.0, rate=0.5, window_s=10.0)


@pytest.fixture(scope="module")
def report(llm_triton, tmp_path_factory: pytest.TempPathFactory) -> LlmSoakReport:
    client = llm_triton.client
    committed = client.config(LLM_MODEL)
    with client.restoring(LLM_MODEL, committed):
        client.load(LLM_MODEL, soak_config(client))
        folder = tmp_path_factory.mktemp("llm-soak")
        gateway = start_gateway(llm_triton.options.grpc_url, folder / "gateway.log", "--llm-max-streams", str(SETTINGS.gateway_streams))
        try:
            options = llm_triton.options
            targets = Targets(options.grpc_url, options.http_url, options.metrics_url, gateway.url, llm_triton.pid, gateway.process.pid)
            result = run_llm_soak(targets, SETTINGS)
        finally:
            gateway.stop()
    write_report(result, folder)
    print(result.summary())
    return result


def test_the_soak_passes_every_request_ended_as_its_kind_allows(report: LlmSoakReport) -> None:
    assert report.passed, report.summary()
    assert not report.unexpected and report.sent == sum(sum(per.values()) for per in report.outcomes.values())


def test_every_path_answered_and_every_bad_kind_got_its_error(report: LlmSoakReport) -> None:
    for kind in ("grpc", "generate_stream", "openai_chat"):
        assert report.outcomes.get(kind, {}).get(OK, 0) >= 1, (kind, report.outcomes)
    bad = {kind: per for kind, per in report.outcomes.items() if kind.startswith("bad_")}
    assert bad and all(set(per) == {ERROR} for per in bad.values()), report.outcomes


def test_clients_that_left_are_the_models_aborts(report: LlmSoakReport) -> None:
    cancelled = sum(per.get(CANCELLED, 0) for per in report.outcomes.values())
    assert cancelled >= 1, report.outcomes
    assert report.server_finished["abort"] == report.client_finished["abort"] == cancelled
    assert report.server_finished["length"] == report.client_finished["length"] >= 1


def test_the_burst_is_refused_fast_on_both_bounds_and_the_server_ends_idle(report: LlmSoakReport) -> None:
    assert report.bursts["burst_openai_chat"].get(REJECTED, 0) >= SETTINGS.burst_extra, report.bursts
    assert report.bursts["burst_grpc"].get(REJECTED, 0) >= 1, report.bursts
    assert report.rejection_s_max is not None and report.rejection_s_max <= SETTINGS.reject_within_s
    assert report.end_state == {"kv_cache_usage_perc": 0.0, "num_requests_running": 0.0, "num_requests_waiting": 0.0}
    assert {"tritonserver", "stub:llm", "gateway"} <= set(report.memory_growth_mb)

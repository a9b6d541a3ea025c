"""A load level's LLM figures, computed by hand on synthetic records (seconds in, ms out)."""

from __future__ import annotations

import pytest

from tools.load.llm.figures import Distribution, LoadFigures, Slo
from tools.load.llm.records import StreamRecord
from tools.load.outcomes import CLIENT_TIMEOUT


def record(index: int, sent: float, times: list[float], end: float | None = None, outcome: str = "ok", tokens_in: int = 10) -> StreamRecord:
    r = StreamRecord(index, sent, tokens_in=tokens_in, outcome=outcome)
    for t in times:
        r.add_tokens(t, 1)
    r.end_s = end if end is not None or outcome != "ok" else times[-1]
    return r


# sent at 0: first token 0.2 s, then gaps 0.1, 0.1, 0.2 -> TTFT 200 ms, TPOT (0.6-0.2)/3 = 133.3 ms, E2E 600 ms
A = record(0, 0.0, [0.2, 0.3, 0.4, 0.6])
# sent at 1: first token at 1.4, one gap of 0.05 -> TTFT 400 ms, TPOT 50 ms, E2E 500 ms (ends at 1.5)
B = record(1, 1.0, [1.4, 1.45], end=1.5)
# still streaming when its deadline ran out: its 2 tokens count as delivered, nothing else does
C = record(2, 2.0, [2.1, 2.2], outcome=CLIENT_TIMEOUT)


def test_ttft_tpot_itl_and_e2e_are_taken_over_completed_requests_in_ms() -> None:
    figures = LoadFigures.of([A, B, C], duration_s=4.0, slo=Slo(ttft_s=1.0, tpot_s=0.1))
    assert figures.ttft.count == 2 and figures.ttft.avg == pytest.approx(300.0)
    assert (figures.ttft.min, figures.ttft.max, figures.ttft.p50) == pytest.approx((200.0, 400.0, 300.0))
    assert figures.tpot.avg == pytest.approx((400.0 / 3 + 50.0) / 2)
    assert (figures.itl.min, figures.itl.max) == pytest.approx((50.0, 200.0))
    assert figures.itl.count == 4 and figures.itl.avg == pytest.approx((100 + 100 + 200 + 50) / 4)
    assert figures.e2e.avg == pytest.approx(550.0)
    assert figures.tokens_out.avg == pytest.approx(3.0) and figures.tokens_in.avg == pytest.approx(10.0)


def test_throughput_counts_every_token_delivered_and_goodput_the_requests_within_every_objective() -> None:
    figures = LoadFigures.of([A, B, C], duration_s=4.0, slo=Slo(ttft_s=1.0, tpot_s=0.1))
    assert figures.output_tokens_per_s == pytest.approx((4 + 2 + 2) / 4.0)
    assert figures.requests_per_s == pytest.approx(2 / 4.0)
    assert figures.goodput_rps == pytest.approx(1 / 4.0)  # A's TPOT of 133 ms misses 100 ms; C never finished
    assert figures.good_share == pytest.approx(1 / 3)
    assert figures.outcomes == {"ok": 2, CLIENT_TIMEOUT: 1}


def test_an_end_to_end_objective_counts_alone_when_it_is_the_only_one() -> None:
    slo = Slo.parse_goodput(["e2el:520"])
    assert slo == Slo(ttft_s=None, tpot_s=None, e2e_s=0.52)
    figures = LoadFigures.of([A, B, C], duration_s=2.0, slo=slo)
    assert figures.goodput_rps == pytest.approx(1 / 2.0)  # B ends after 500 ms, A after 600 ms


def test_the_goodput_flag_reads_vllms_spelling_in_ms_with_spaces_or_commas() -> None:
    assert Slo.parse_goodput(["ttft:1000", "tpot:100"]) == Slo(1.0, 0.1, None)
    assert Slo.parse_goodput(["ttft:500,tpot:50"]) == Slo(0.5, 0.05, None)
    with pytest.raises(ValueError, match="itl:5"):
        Slo.parse_goodput(["itl:5"])
    with pytest.raises(ValueError, match="at least one"):
        Slo.parse_goodput([""])


def test_per_user_throughput_is_the_inverse_of_each_requests_tpot() -> None:
    figures = LoadFigures.of([A, B], duration_s=2.0, slo=Slo())
    assert figures.output_tokens_per_s_per_user.avg == pytest.approx((3 / 0.4 + 1 / 0.05) / 2)


def test_the_lag_behind_the_schedule_is_measured_from_each_requests_arrival() -> None:
    late = record(3, 1.03, [1.2])
    late.arrival_s = 1.0
    figures = LoadFigures.of([A, late], duration_s=2.0, slo=Slo())
    assert figures.arrival_lag.count == 1 and figures.arrival_lag.avg == pytest.approx(30.0)


def test_a_level_without_answers_has_no_latency_figures_rather_than_zeros() -> None:
    figures = LoadFigures.of([record(0, 0.0, [], outcome="error")], duration_s=3.0, slo=Slo())
    assert figures.ttft == Distribution() and figures.ttft.avg is None and figures.itl.p99 is None
    assert figures.goodput_rps == 0.0 and figures.completed == 0


def test_a_record_serialises_with_its_derived_figures() -> None:
    data = B.to_dict()
    assert data["token_times"] == [1.4, 1.45] and data["tokens_out"] == 2 and data["finish_reason"] is None
    assert data["ttft_s"] == pytest.approx(0.4) and data["e2e_s"] == pytest.approx(0.5) and data["arrival_s"] is None

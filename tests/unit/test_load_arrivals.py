"""Gamma arrivals (vllm bench serve's burstiness) and trace files: seeded, no clock involved."""

from __future__ import annotations

import numpy as np
import pytest

from tools.load.schedules import Gamma, Poisson
from tools.load.traces import read_arrival_offsets


def gaps(schedule, seconds: float = 4000.0, seed: int = 3) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], schedule.offsets(seconds, np.random.default_rng(seed))]))


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_arrivals_keep_the_mean_rate_and_have_a_cv_of_one_over_the_root_of_the_burstiness(burstiness: float) -> None:
    g = gaps(Gamma(5.0, burstiness))
    assert len(g) > 15_000
    assert 1.0 / g.mean() == pytest.approx(5.0, rel=0.04)
    assert g.std() / g.mean() == pytest.approx(1.0 / np.sqrt(burstiness), rel=0.06)


def test_a_burstiness_of_one_is_as_irregular_as_poisson() -> None:
    gamma, poisson = gaps(Gamma(5.0, 1.0)), gaps(Poisson(5.0))
    assert gamma.std() / gamma.mean() == pytest.approx(poisson.std() / poisson.mean(), rel=0.05)


def test_gamma_arrivals_are_seeded_and_labelled() -> None:
    schedule = Gamma(2.0, 0.5)
    first, again = (schedule.offsets(30.0, np.random.default_rng(7)) for _ in range(2))
    assert np.array_equal(first, again)
    assert schedule.label() == "gamma 2 req/s, burstiness 0.5"


@pytest.mark.parametrize("burstiness", [0.0, -1.0, float("inf")])
def test_a_burstiness_outside_zero_to_infinity_is_refused(burstiness: float) -> None:
    with pytest.raises(ValueError, match="burstiness"):
        Gamma(1.0, burstiness)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("trace.txt", "# offsets\n0.0\n0.5\n1.25\n", (0.0, 0.5, 1.25)),
        ("trace.csv", "offset_s,prompt\n0.0,a\n0.5,b\n1.25,c\n", (0.0, 0.5, 1.25)),
        ("trace.csv", "timestamp\n1700000010.0\n1700000010.5\n1700000011.25\n", (0.0, 0.5, 1.25)),
        ("trace.jsonl", '{"offset_s": 0.0}\n{"offset_s": 0.5}\n\n{"offset_s": 1.25}\n', (0.0, 0.5, 1.25)),
        ("trace.jsonl", '{"timestamp": 100}\n{"timestamp": 100.5}\n{"timestamp": 101.25}\n', (0.0, 0.5, 1.25)),
    ],
)
def test_a_trace_is_read_from_plain_lines_csv_or_jsonl(tmp_path, name: str, text: str, expected: tuple) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert read_arrival_offsets(path) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("trace.csv", "offset_s\n0.1\nsoon\n", r"trace\.csv:3: 'soon'"),
        ("trace.csv", "when\n0.1\n", "offset_s"),
        ("trace.jsonl", '{"offset_s": 0.1}\n[1]\n', r"trace\.jsonl:2: not a JSON object"),
        ("trace.txt", "0.1\n-2\n", r"trace\.txt:2: an arrival offset cannot be negative"),
        ("trace.txt", "# nothing\n", "no arrival offsets"),
    ],
)
def test_a_bad_trace_entry_is_named_by_file_and_line(tmp_path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_arrival_offsets(path)

"""The LLM control law on synthetic windows, with hand-computed expectations."""

from __future__ import annotations

import pytest

from tools.adapt.llm.control import LlmController, LlmLaw, LlmSetting, LlmWindow, want

LAW = LlmLaw(ttft_slo_s=1.0, tpot_slo_s=0.1, confirm_windows=1, drift_windows=1, min_interval_s=0.0)
DEFAULT = LlmSetting(512, 0.0)


def window(ttft: float | None = 0.2, tpot: float | None = 0.02, waiting: float = 0.0, samples: int = 10) -> LlmWindow:
    return LlmWindow(ttft, tpot, waiting, samples)


def test_tpot_over_its_slo_halves_the_budget():
    assert want(LAW, DEFAULT, window(tpot=0.15))[0] == LlmSetting(256, 0.0)


def test_tpot_over_wins_over_ttft_over_with_a_queue():
    assert want(LAW, DEFAULT, window(ttft=3.0, tpot=0.15, waiting=5))[0] == LlmSetting(256, 0.0)


def test_the_budget_never_goes_below_its_minimum():
    setting, reason, _ = want(LAW, LlmSetting(64, 0.0), window(tpot=0.5))
    assert setting == LlmSetting(64, 0.0) and "minimum" in reason


def test_ttft_over_with_a_queue_and_tpot_slack_doubles_the_budget():
    assert want(LAW, DEFAULT, window(ttft=2.0, tpot=0.05, waiting=3))[0] == LlmSetting(1024, 0.0)


def test_ttft_over_without_a_queue_holds():
    setting, reason, _ = want(LAW, DEFAULT, window(ttft=2.0, waiting=0.5))
    assert setting == DEFAULT and "without a queue" in reason


def test_ttft_over_without_tpot_slack_holds():
    # TPOT 0.09 is inside the SLO (0.1) but above slack 0.8 x 0.1 = 0.08
    setting, reason, _ = want(LAW, DEFAULT, window(ttft=2.0, tpot=0.09, waiting=3))
    assert setting == DEFAULT and "no slack" in reason


def test_ttft_over_cuts_max_wait_before_raising_the_budget():
    assert want(LAW, LlmSetting(512, 12.0), window(ttft=2.0, waiting=3))[0] == LlmSetting(512, 7.0)
    assert want(LAW, LlmSetting(512, 3.0), window(ttft=2.0, waiting=3))[0] == LlmSetting(512, 0.0)


def test_both_inside_with_slack_drift_one_step_toward_the_default():
    assert want(LAW, LlmSetting(128, 0.0), window())[0] == LlmSetting(256, 0.0)
    assert want(LAW, LlmSetting(2048, 0.0), window())[0] == LlmSetting(1024, 0.0)
    assert want(LAW, LlmSetting(384, 0.0), window())[0] == LlmSetting(512, 0.0)  # 768 capped at the default


def test_inside_the_slo_but_not_inside_the_slack_holds():
    # TTFT 0.9 s: under the 1 s SLO, above 0.8 s
    assert want(LAW, LlmSetting(128, 0.0), window(ttft=0.9))[0] == LlmSetting(128, 0.0)


def test_too_few_samples_hold():
    assert want(LAW, DEFAULT, window(tpot=0.5, samples=2))[0] == DEFAULT


def test_a_move_needs_confirm_windows_in_a_row():
    controller = LlmController(LlmLaw(1.0, 0.1, confirm_windows=2, min_interval_s=0.0))
    assert not controller.observe(window(tpot=0.2), 1.0).changed
    decision = controller.observe(window(tpot=0.2), 2.0)
    assert decision.changed and controller.setting == LlmSetting(256, 0.0)


def test_alternating_windows_never_move():
    controller = LlmController(LlmLaw(1.0, 0.1, confirm_windows=2, min_interval_s=0.0))
    for t in range(10):
        w = window(tpot=0.2) if t % 2 else window(ttft=2.0, waiting=4)
        assert not controller.observe(w, float(t)).changed
    assert controller.setting == DEFAULT


def test_changes_keep_the_minimum_interval():
    controller = LlmController(LlmLaw(1.0, 0.1, confirm_windows=1, min_interval_s=5.0))
    assert controller.observe(window(tpot=0.2), 0.0).changed  # 512 -> 256
    assert not controller.observe(window(tpot=0.2), 2.0).changed
    assert controller.observe(window(tpot=0.2), 5.0).changed  # 256 -> 128
    assert controller.setting == LlmSetting(128, 0.0)


def test_drifting_back_needs_drift_windows():
    controller = LlmController(LlmLaw(1.0, 0.1, confirm_windows=1, drift_windows=3, min_interval_s=0.0), LlmSetting(128, 0.0))
    assert [controller.observe(window(), float(t)).changed for t in range(3)] == [False, False, True]
    assert controller.setting == LlmSetting(256, 0.0)


def test_the_law_refuses_a_default_outside_its_bounds():
    with pytest.raises(ValueError):
        LlmLaw(1.0, 0.1, default=LlmSetting(4096, 0.0))

"""The LLM's adaptive control law: the token budget and max-wait from TTFT/TPOT windows.

Pure (no clock, no I/O: the window and its time are passed in), so the simulator and the
live controller run the same law. Why these directions (Sarathi-Serve's trade-off):
- a step's time grows with its prefill tokens, and every running stream waits for the whole
  step: TPOT over its SLO asks for a smaller `max_num_batched_tokens` (smaller prefill
  chunks beside the decodes);
- TTFT over its SLO with a queue, while TPOT has slack, asks for a larger budget (more
  prompts prefilled per step); without a queue a larger budget cannot help (one prompt's
  chunk is capped by long_prefill_token_threshold), so the law holds;
- max-wait only delays a step that could run, so TTFT over its SLO cuts it first;
- both inside `slack` x SLO: drift back one step toward the configured default.
Between "inside slack" and "over the SLO" the law holds (the hysteresis band); a move needs
`confirm_windows` windows in a row asking for the same setting and `min_interval_s` since
the last change; each move is at most one `factor` (budget) or `wait_step_ms` (max-wait).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LlmWindow:
    """One observation window: p99s over the requests it saw (None: no sample) and the queue."""

    ttft_p99_s: float | None
    tpot_p99_s: float | None
    waiting: float  # requests waiting to be scheduled (mean over the window)
    samples: int  # requests whose first token (TTFT) fell in the window


@dataclass(frozen=True)
class LlmSetting:
    max_num_batched_tokens: int
    max_wait_ms: float


@dataclass(frozen=True)
class LlmLaw:
    ttft_slo_s: float
    tpot_slo_s: float
    default: LlmSetting = LlmSetting(512, 0.0)
    min_budget: int = 64  # never below max_num_seqs (the scheduler refuses it)
    max_budget: int = 2048
    factor: float = 2.0  # one budget move: x or / this
    wait_step_ms: float = 5.0  # one max-wait move
    slack: float = 0.8  # "inside" means at most this share of the SLO
    queue_min: float = 1.0  # mean waiting that counts as a queue
    min_samples: int = 3  # fewer TTFT samples: hold
    confirm_windows: int = 2
    drift_windows: int = 3  # drifting back to the default needs a longer agreement
    min_interval_s: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < self.min_budget <= self.default.max_num_batched_tokens <= self.max_budget:
            raise ValueError("budgets must satisfy 0 < min_budget <= default <= max_budget")
        if self.factor <= 1 or not 0 < self.slack <= 1 or self.confirm_windows < 1 or self.drift_windows < 1:
            raise ValueError("factor > 1, 0 < slack <= 1 and at least one confirming window")


@dataclass(frozen=True)
class LlmDecision:
    at_s: float
    setting: LlmSetting  # in force after this window
    wanted: LlmSetting  # what this window asked for
    changed: bool
    reason: str
    window: LlmWindow

    def to_dict(self) -> dict:
        return {
            "at_s": round(self.at_s, 3),
            "changed": self.changed,
            "reason": self.reason,
            **{f"setting_{k}": v for k, v in asdict(self.setting).items()},
            **{f"window_{k}": v for k, v in asdict(self.window).items()},
        }


def _over(value: float | None, slo: float) -> bool:
    return value is not None and value > slo


def _inside(value: float | None, slo: float, slack: float) -> bool:
    return value is None or value <= slack * slo


def want(law: LlmLaw, current: LlmSetting, window: LlmWindow) -> tuple[LlmSetting, str, bool]:
    """What one window asks for, why, and whether it is a drift back (needs more windows)."""
    budget, wait = current.max_num_batched_tokens, current.max_wait_ms
    if window.samples < law.min_samples:
        return current, f"hold: {window.samples} TTFT samples < {law.min_samples}", False
    tpot_over = _over(window.tpot_p99_s, law.tpot_slo_s)
    ttft_over = _over(window.ttft_p99_s, law.ttft_slo_s)
    if tpot_over:
        smaller = max(law.min_budget, int(budget / law.factor))
        if smaller < budget:
            return LlmSetting(smaller, wait), "TPOT p99 over its SLO: smaller prefill budget", False
        return current, "hold: TPOT p99 over its SLO but the budget is at its minimum", False
    if ttft_over and wait > 0:
        shorter = max(0.0, wait - law.wait_step_ms)
        return LlmSetting(budget, shorter), "TTFT p99 over its SLO: shorter max-wait", False
    if ttft_over:
        if window.waiting < law.queue_min:
            return current, "hold: TTFT p99 over its SLO without a queue (a larger budget cannot help)", False
        if not _inside(window.tpot_p99_s, law.tpot_slo_s, law.slack):
            return current, "hold: TTFT p99 over its SLO, but TPOT has no slack for a larger budget", False
        larger = min(law.max_budget, int(budget * law.factor))
        if larger > budget:
            return LlmSetting(larger, wait), "TTFT p99 over its SLO with a queue and TPOT slack: larger budget", False
        return current, "hold: TTFT p99 over its SLO but the budget is at its maximum", False
    if _inside(window.ttft_p99_s, law.ttft_slo_s, law.slack) and _inside(window.tpot_p99_s, law.tpot_slo_s, law.slack):
        target = _toward_default(law, current)
        if target != current:
            return target, "both inside the SLO with slack: drift back toward the default", True
        return current, "hold: both inside the SLO at the default", False
    return current, "hold: inside the SLO, in the hysteresis band", False


def _toward_default(law: LlmLaw, current: LlmSetting) -> LlmSetting:
    default = law.default
    budget = current.max_num_batched_tokens
    if budget < default.max_num_batched_tokens:
        budget = min(default.max_num_batched_tokens, int(budget * law.factor))
    elif budget > default.max_num_batched_tokens:
        budget = max(default.max_num_batched_tokens, int(budget / law.factor))
    wait = current.max_wait_ms
    if wait < default.max_wait_ms:
        wait = min(default.max_wait_ms, wait + law.wait_step_ms)
    elif wait > default.max_wait_ms:
        wait = max(default.max_wait_ms, wait - law.wait_step_ms)
    return LlmSetting(budget, wait)


class LlmController:
    """The law with its memory: the setting in force, the streak of windows agreeing on a
    target, and the time of the last change."""

    def __init__(self, law: LlmLaw, start: LlmSetting | None = None) -> None:
        self.law = law
        self.setting = start or law.default
        self._streak_target: LlmSetting | None = None
        self._streak = 0
        self._last_change_s: float | None = None

    def observe(self, window: LlmWindow, now_s: float) -> LlmDecision:
        target, reason, drift = want(self.law, self.setting, window)
        if target == self.setting:
            self._streak_target, self._streak = None, 0
            return LlmDecision(now_s, self.setting, target, False, reason, window)
        self._streak = self._streak + 1 if target == self._streak_target else 1
        self._streak_target = target
        needed = self.law.drift_windows if drift else self.law.confirm_windows
        if self._streak < needed:
            return LlmDecision(now_s, self.setting, target, False, f"{reason} (window {self._streak} of {needed})", window)
        if self._last_change_s is not None and now_s - self._last_change_s < self.law.min_interval_s:
            return LlmDecision(now_s, self.setting, target, False, f"{reason} (within min interval)", window)
        self.setting = target
        self._streak_target, self._streak = None, 0
        self._last_change_s = now_s
        return LlmDecision(now_s, target, target, True, reason, window)

"""Choose the step's intra-op thread count from the steps' own times.

torch runs each operator as an OpenMP region over its threads, and GNU OpenMP's threads spin
while they wait for each other. On a quiet 2-core machine that is the fast way (no wake-up per
region); beside another CPU-heavy process it is ruinous: the region waits for a thread the kernel
has descheduled, a product taking ~0.15 ms takes a scheduler slice (~8 ms), and a step of
hundreds of regions slows 10-100x (docs/results/2026-12-07-llm-under-cpu-contention.md). One
thread has no region to wait for. Which is faster is a fact of the moment, so it is measured:
the governor runs the configured thread count, now and then tries the other for two steps of
the same size, and keeps whichever was faster by a clear margin. Tries grow rarer while they
lose (2 s apart, doubling to 30 s), so a machine that stays quiet or busy pays almost nothing.

The thread count can change a step's roundings: the shipped model's float32 logits differed
between 1 and 2 threads at 4-15 decode rows and 64- and 80-token prefills (MKL splits some
products' sums over threads), while the bfloat16 ones were equal where checked (1, 16 and 40 rows,
a 200-token prefill). So the governor is a knob, off by default (`adaptive_threads`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SWITCH_MARGIN = 0.85  # the other count must take at most this share of the current one's time
FIRST_TRY_AFTER_S = 2.0
LONGEST_WAIT_S = 30.0
TRY_STEPS = 2  # steps per try: the faster one counts (a try's first step may pay a team's start)
SMOOTHING = 0.3  # weight of a new step in a count's running time per step size


def size_class(tokens: int) -> int:
    """Steps compared with each other: those of the same power-of-two token count."""
    return max(tokens, 1).bit_length()


@dataclass
class ThreadGovernor:
    """Picks each step's thread count, `threads` or 1; `set_threads` applies it (torch.set_num_threads)."""

    threads: int
    set_threads: Callable[[int], None]
    clock: Callable[[], float] = time.monotonic
    current: int = field(init=False)
    switches: int = field(init=False, default=0)  # how often the count changed for good (each one logged)
    _applied: int = field(init=False)
    _times: dict[int, float] = field(init=False, default_factory=dict)  # size class -> the current count's seconds
    _try_left: int = field(init=False, default=0)
    _try_size: int = field(init=False, default=0)
    _try_best: float = field(init=False, default=float("inf"))
    _wait_s: float = field(init=False, default=FIRST_TRY_AFTER_S)
    _next_try: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self._applied = self.threads
        self._next_try = self.clock() + self._wait_s

    @property
    def active(self) -> bool:
        return self.threads > 1

    @property
    def other(self) -> int:
        return 1 if self.current == self.threads else self.threads

    def before_step(self, tokens: int) -> int:
        """The count this step of `tokens` runs with (applied)."""
        wanted = self.current
        if self.active:
            size = size_class(tokens)
            if self._try_left == 0 and self.clock() >= self._next_try and size in self._times:
                self._try_left, self._try_best, self._try_size = TRY_STEPS, float("inf"), size
            if self._try_left and size == self._try_size:
                wanted = self.other
        if wanted != self._applied:
            self.set_threads(wanted)
            self._applied = wanted
        return wanted

    def after_step(self, tokens: int, seconds: float) -> None:
        """Record the step just run (with the count before_step chose)."""
        if not self.active:
            return
        size = size_class(tokens)
        if self._applied == self.current:
            previous = self._times.get(size)
            self._times[size] = seconds if previous is None else previous + SMOOTHING * (seconds - previous)
            return
        self._try_best = min(self._try_best, seconds)
        self._try_left -= 1
        if self._try_left:
            return
        if self._try_best < SWITCH_MARGIN * self._times[size]:
            log.info(
                "steps of ~%d tokens run faster on %d thread(s) than on %d now (%.1f vs %.1f ms): switching",
                2 ** (size - 1), self.other, self.current, self._try_best * 1e3, self._times[size] * 1e3,
            )  # fmt: skip
            self.current = self.other
            self.switches += 1
            self._times = {size: self._try_best}  # the old count's times say nothing of the new one's
            self._wait_s = FIRST_TRY_AFTER_S
        else:
            self._wait_s = min(2 * self._wait_s, LONGEST_WAIT_S)
        self._next_try = self.clock() + self._wait_s

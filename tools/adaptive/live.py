"""Run the control law against a live server: watch windows, apply changes by reloading.

A change is applied through the model-control load API with a config override (the
server's own config with only `max_queue_delay_microseconds` changed). The reload runs
in a thread of its own so the window clock keeps ticking; while it is in flight the law
is asked for nothing new, and the windows around it are dropped (the reload resets the
statistics and its loading work competes for the same cores).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from tools.adaptive.control import Controller, Decision
from tools.adaptive.observe import observation, snapshot
from tools.model_config import ModelConfig, batching_problems
from tools.tuning.reload import ReloadError, load_with_config

log = logging.getLogger("adapt")

MAX_STATS_FAILURES = 3
PROBE_MODEL = "__model_control_probe__"  # never a real model: unloading it changes nothing


@dataclass(frozen=True)
class ReloadRecord:
    started_s: float
    seconds: float
    before_us: int
    after_us: int
    ok: bool
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def with_delay(base: ModelConfig, delay_us: int) -> ModelConfig:
    """`base` with a new batching delay; nothing else changes."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.dynamic_batching.max_queue_delay_microseconds = int(delay_us)
    problems = batching_problems(config)
    if problems:
        raise ValueError("; ".join(problems))
    return config


def server_config(grpc_url: str, model: str) -> ModelConfig:
    """The config the server runs now (the base every change is applied to)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        return client.get_model_config(model).config
    finally:
        client.close()


def model_control_problem(http_url: str, headers: dict | None = None) -> str | None:
    """Why this server would refuse the reloads (None when it accepts them), asked before
    anything runs and without touching a model: Triton 2.51 answers the unload of a model it
    does not know with 200 in explicit mode, 503 "explicit model load / unload is not allowed
    if polling is enabled" in the `none` and `poll` modes alike, 403 without the admin key."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(http_url)
    try:
        client.unload_model(PROBE_MODEL, headers=headers)
    except InferenceServerException as exc:
        message = exc.message() or str(exc)
        if "not allowed" in message:
            return (f"the server at {http_url} is not in explicit model-control mode, so it cannot apply a new delay; "
                    "start it with --model-control-mode explicit")  # fmt: skip
        if "restricted" in message:
            return f"the model-control API of {http_url} is restricted: pass its key with --admin-key-file ({message})"
        return f"the model-control API of {http_url} refused a harmless request: {message}"
    finally:
        client.close()
    return None


class LiveController:
    def __init__(
        self,
        http_url: str,
        model: str,
        base: ModelConfig,
        controller: Controller,
        headers: dict | None = None,
        window_s: float = 2.0,
        dry_run: bool = False,
        reload: Callable[[ModelConfig], None] | None = None,
    ) -> None:
        self.http_url, self.model, self.base, self.controller = http_url, model, base, controller
        self.window_s, self.dry_run = window_s, dry_run
        self.instances = sum(group.count or 1 for group in base.instance_group) or 1
        self.reload = reload or (lambda config: load_with_config(http_url, model, config, headers))
        self.decisions: list[Decision] = []
        self.reloads: list[ReloadRecord] = []
        self.lock = threading.Lock()
        self.reload_thread: threading.Thread | None = None
        self.epoch = 0  # bumped when a reload starts or ends: windows across it are dropped
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Watch windows until `stop` is set or `duration_s` has passed; waits for a reload in flight."""
        failures = 0
        previous, epoch = snapshot(self.http_url, self.model, self.now()), self.epoch
        while not stop.wait(max(0.0, previous.at_s + self.window_s - self.now())):
            if duration_s is not None and self.now() >= duration_s:
                break
            try:
                current = snapshot(self.http_url, self.model, self.now())
                failures = 0
            except OSError as exc:
                failures += 1
                log.warning("statistics unavailable (%s)", exc)
                if failures >= MAX_STATS_FAILURES:
                    raise
                continue
            with self.lock:
                valid = epoch == self.epoch and not self.controller.in_flight
                epoch = self.epoch
            window, previous = observation(previous, current, self.instances) if valid else None, current
            if window is None:
                log.debug("window at %.1f s dropped (a reload was in flight or reset the counters)", current.at_s)
                continue
            self.step(window, current.at_s)
        if self.reload_thread:
            self.reload_thread.join()

    def step(self, window, at_s: float) -> Decision:
        with self.lock:
            decision = self.controller.observe(window, at_s)
        self.decisions.append(decision)
        if not decision.changed:
            log.debug("[%6.1f s] %s", at_s, decision.describe())
            return decision
        if self.dry_run:
            log.info("[%6.1f s] dry run, would set %s", at_s, decision.describe())
            with self.lock:
                self.controller.reload_finished(True)
            return decision
        log.info("[%6.1f s] %s", at_s, decision.describe())
        with self.lock:
            self.epoch += 1
        self.reload_thread = threading.Thread(target=self.apply, args=(decision,), name="adapt-reload", daemon=True)
        self.reload_thread.start()
        return decision

    def apply(self, decision: Decision) -> None:
        started = self.now()
        error = ""
        try:
            self.reload(with_delay(self.base, decision.after_us))
        except (ReloadError, ValueError, OSError) as exc:
            error = str(exc)
        seconds = self.now() - started
        with self.lock:
            kept = self.controller.reload_finished(not error)
            self.epoch += 1
        self.reloads.append(ReloadRecord(started, seconds, decision.before_us, decision.after_us, not error, error))
        if error:
            log.error("reload to %d us failed after %.1f s; keeping the last good delay %d us: %s", decision.after_us, seconds, kept, error)
        else:
            log.info("reload to %d us done in %.2f s", decision.after_us, seconds)

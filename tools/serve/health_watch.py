"""Bring a model back when its Python backend stub process dies.

Measured on Triton 2.51: when a stub (the tokenizer's, or our Python-based onnxruntime
backend's) is killed, Triton does not restart it. The model keeps reporting READY,
while every request to it (and to the `embed` ensemble) fails after about 1 s with
"Stub process '<instance>' is not healthy". Loading the same config again is a no-op;
a load with a changed config override starts a fresh stub and swaps it in.

So the watch looks at the stub processes themselves (children of tritonserver; a
stub's second argument is its model file, `<repository>/<model>/<version>/...`), and
for a model the server still lists as READY but which has no live stub any more it
reloads the committed config with a `health_watch_generation` parameter that differs
on every reload. Models unloaded on purpose are left alone. Without model control
(`--model-control-mode none`) the only way back is a server restart, which the
launcher does when the watch reports it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.repo.model_config import load_config
from tools.triton_client import TritonClient, TritonError

log = logging.getLogger(__name__)

STUB_BINARY = "triton_python_backend_stub"
GENERATION_PARAMETER = "health_watch_generation"


@dataclass(frozen=True)
class StubProcess:
    pid: int
    model: str
    alive: bool  # False for a zombie the server has not reaped yet

    @classmethod
    def read(cls, pid: int) -> StubProcess | None:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None
        if len(argv) < 2 or not argv[0].decode(errors="replace").endswith(STUB_BINARY):
            return None
        model = Path(argv[1].decode(errors="replace")).parent.parent.name
        return cls(pid, model, state not in ("Z", "X"))


def child_pids(parent: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                children.append(int(entry.name))
    return children


def stub_processes(server_pid: int) -> list[StubProcess]:
    """The Python backend stubs that tritonserver `server_pid` started."""
    return [stub for pid in child_pids(server_pid) if (stub := StubProcess.read(pid))]


def live_stub_models(server_pid: int) -> set[str]:
    return {stub.model for stub in stub_processes(server_pid) if stub.alive}


def reload_model(client: TritonClient, model: str, repository: Path) -> None:
    """Load the committed config with a fresh generation parameter, so Triton really
    reloads (a fresh stub) and swaps it in without a gap."""
    config = load_config(repository / model)
    config.parameters[GENERATION_PARAMETER].string_value = str(time.time_ns())
    client.load(model, config)


@dataclass
class HealthWatch:
    """A daemon thread that checks every `interval_s` and recovers dead stubs.

    `recover(model)` defaults to a reload; the launcher passes its own for a server
    without model control. A model must look dead on two checks in a row, so a stub
    that is being swapped during someone else's reload is not mistaken for a crash."""

    server_pid: int
    client: TritonClient  # with the admin key: the repository index and loads need it
    repository: Path
    interval_s: float = 2.0
    recover: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.recoveries: list[tuple[str, float]] = []  # (model, seconds the recovery took)
        self._suspects: set[str] = set()
        self._expected = live_stub_models(self.server_pid)

    def dead_models(self) -> set[str]:
        live = live_stub_models(self.server_pid)
        self._expected |= live
        missing = self._expected - live
        if missing:
            try:
                wanted = self.client.ready_models()  # listed READY (the repository index)
            except TritonError as exc:
                log.debug("repository index unavailable (%s); treating every missing stub as dead", exc)
                wanted = missing
            self._expected -= missing - wanted  # unloaded on purpose: not ours to bring back
            missing &= wanted
        return missing

    def check_once(self) -> list[str]:
        """One check; returns the models it recovered."""
        dead = self.dead_models()
        confirmed, self._suspects = dead & self._suspects, dead - self._suspects
        recovered = []
        for model in sorted(confirmed):
            log.error("the backend stub of %s died; %s it", model, "reloading" if self.recover is None else "recovering")
            started = time.monotonic()
            try:
                (self.recover or self._reload)(model)
            except Exception as exc:  # keep watching; the next check tries again
                log.error("recovering %s failed: %s", model, exc)
                self._suspects.add(model)
                continue
            self.recoveries.append((model, time.monotonic() - started))
            log.info("%s recovered in %.1f s", model, self.recoveries[-1][1])
            recovered.append(model)
        return recovered

    def _reload(self, model: str) -> None:
        reload_model(self.client, model, self.repository)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_once()
            except Exception as exc:  # the server may be stopping; report and carry on
                log.debug("health check failed: %s", exc)

    def start(self) -> HealthWatch:
        self._thread = threading.Thread(target=self._loop, name="health-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=self.interval_s + 5)

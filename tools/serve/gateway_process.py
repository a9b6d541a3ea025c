"""The gateway as a child process beside a Triton: for `make serve`, the tests and the benchmark.

A separate process (`python -m gateway`), not a thread: its event loop and JSON work do
not contend with the launcher's GIL, and it is stopped like a server (SIGTERM: uvicorn
stops accepting and finishes the requests in flight; then SIGKILL). It runs in its own
session, so a Ctrl-C in the terminal reaches the launcher only, which stops it in order.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gateway.settings import DEFAULT_PORT, GatewaySettings
from tools.paths import REPO_ROOT
from tools.ports import port_in_use
from tools.serve.process_group import stop_process_group
from tools.triton_client.readiness import wait_for_http_ok

log = logging.getLogger(__name__)


class GatewayStartError(RuntimeError):
    """The gateway did not come up; the message says why (with its log tail when it has one)."""


@dataclass
class GatewayProcess:
    triton_grpc_url: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    extra_args: tuple[str, ...] = ()
    log_path: Path | None = None
    env: dict[str, str] | None = None
    process: subprocess.Popen | None = field(default=None, init=False)

    @classmethod
    def for_settings(cls, settings: GatewaySettings, log_path: Path | None = None) -> GatewayProcess:
        """A child that runs with `settings`: they travel as `python -m gateway` options
        (GatewaySettings.to_cli_args), never as a string to split."""
        others = settings.to_cli_args()
        for flag in ("--triton-url", "--host", "--port"):
            if flag in others:
                index = others.index(flag)
                del others[index : index + 2]
        return cls(settings.triton_url, settings.host, settings.port, tuple(others), log_path)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gateway",
            "--triton-url",
            self.triton_grpc_url,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def start(self, live_timeout_s: float = 60.0) -> GatewayProcess:
        """Start and wait until it answers `/health/live` (Triton's readiness is `/health`'s business)."""
        if port_in_use(self.host, self.port):
            raise GatewayStartError(f"gateway port {self.port} on {self.host} is already in use; choose another with --gateway-port")
        output: IO[bytes] | None = open(self.log_path, "wb") if self.log_path else None  # noqa: SIM115 - owned by the process
        env = dict(self.env if self.env is not None else os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
        self.process = subprocess.Popen(
            self.command(), cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT if output else None, start_new_session=True
        )
        try:
            self.wait_live(live_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_live(self, timeout_s: float) -> None:
        if wait_for_http_ok(f"{self.url}/health/live", timeout_s, self.process, interval_s=0.1):
            return
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise GatewayStartError(f"the gateway exited with status {code} during start-up.{self.log_tail()}")
        raise GatewayStartError(f"the gateway did not answer within {timeout_s:.0f} s.{self.log_tail()}")

    def wait_ready(self, timeout_s: float) -> bool:
        """True once `/health` says Triton's model is ready through the gateway."""
        return wait_for_http_ok(f"{self.url}/health", timeout_s)

    def restart_if_exited(self) -> bool:
        """For a launcher's watch loop: a gateway that died is started again (True), with its
        exit status logged; Triton keeps serving meanwhile."""
        if self.process is None or self.process.poll() is None:
            return False
        log.error("the gateway exited with status %s; starting it again", self.process.returncode)
        self.process = None
        try:
            self.start()
        except GatewayStartError as exc:
            log.error("%s", exc)
        return True

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n--- last lines of the gateway log ---\n" + "\n".join(text[-lines:])

    def stop(self, grace_s: float = 15.0) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        return stop_process_group(process, ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)), "the gateway")

    def __enter__(self) -> GatewayProcess:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ---- the hook for `python -m tools.serve` ---------------------------------------------


CHAT_EXAMPLE = '{"model":"llm","messages":[{"role":"user","content":"Hi"}],"max_tokens":64}'


def describe(gateway: GatewayProcess) -> tuple[str, ...]:
    return (
        f'OpenAI   {gateway.url}/v1   (try: curl {gateway.url}/v1/embeddings -d \'{{"model":"embed","input":"Hello"}}\')',
        f"         chat: curl {gateway.url}/v1/chat/completions -d '{CHAT_EXAMPLE}'",
        "         (also /v1/completions; stream: true for server-sent events; docs/gateway.md)",
        f"gateway metrics {gateway.url}/metrics",
    )

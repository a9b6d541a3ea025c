"""infinity-emb, the dedicated embedding server compared with, run from its own virtual
environment (`make infinity-venv` installs the pinned version there) and stopped by its PID."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

from tools.bench.gateway.infinity_model import infinity_model_folder
from tools.paths import BUILD_DIR, REPO_ROOT
from tools.ports import free_ports
from tools.serve.process_group import stop_process_group
from tools.triton_client.readiness import wait_for_http_ok

log = logging.getLogger("bench.gateway")

INFINITY_VENV = BUILD_DIR / "infinity-venv"
INFINITY_VERSION = "0.0.78"  # mk/gateway.mk's INFINITY_PIN


class InfinityServer:
    """`infinity_emb v2` from its own virtual environment, serving the model offline."""

    def __init__(self, venv: Path, engine: str, log_path: Path) -> None:
        self.binary = venv / "bin" / "infinity_emb"
        self.engine = engine
        self.log_path = log_path
        (self.port,) = free_ports(1)
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> str | None:
        """None when ready, else why not (the row is then left out and the report says so)."""
        if not self.binary.is_file():
            venv = INFINITY_VENV.relative_to(REPO_ROOT)
            return f"not installed ({self.binary} missing; `make infinity-venv` makes {venv})"
        try:
            folder = infinity_model_folder(self.binary.parent.parent, self.engine)
        except RuntimeError as exc:
            return str(exc)
        command = [
            str(self.binary),
            "v2",
            "--model-id",
            ".",
            "--served-model-name",
            "embed",
            "--engine",
            self.engine,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--device",
            "cpu",
            "--log-level",
            "warning",
            "--pooling-method",
            "mean",  # the model's own (1_Pooling); infinity's optimum engine assumes CLS otherwise
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", INFINITY_ANONYMOUS_USAGE_STATS="0", DO_NOT_TRACK="1")
        log.info("starting infinity-emb (%s engine) on port %d (log: %s)", self.engine, self.port, self.log_path)
        with open(self.log_path, "wb") as output:
            # From inside the folder: infinity lists a local folder's files with absolute paths
            # that optimum then fails to find; "." yields the relative paths it expects.
            self.process = subprocess.Popen(command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        if wait_for_http_ok(f"{self.url}/health", timeout_s, self.process, interval_s=0.5):
            return None
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        self.stop()
        return f"did not start within {timeout_s:.0f} s ({tail[0][:200]})"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_process_group(process, ((signal.SIGTERM, 15.0),), "infinity-emb")

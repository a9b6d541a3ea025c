"""Stop a child's whole process group in escalating steps, and wait for an HTTP endpoint.

Triton, the gateway and the servers a benchmark compares with all run in their own
session, so a terminal's Ctrl-C does not reach them twice and every process they fork
(Triton's backend stubs, uvicorn's workers) goes with them. One implementation of the
escalation and of the readiness poll serves every launcher.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence

log = logging.getLogger(__name__)


def stop_process_group(process: subprocess.Popen, steps: Sequence[tuple[signal.Signals, float]], name: str) -> int | None:
    """Send each signal of `steps` to the group until the process exits, waiting the
    step's seconds in between; then SIGKILL whatever is left of the group."""
    for sig, grace_s in steps:
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s ignored %s for %g s", name, sig.name, grace_s)
    try:  # children left behind in the group (should not happen) go as well
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.poll()


def http_ok(url: str, timeout_s: float = 3.0) -> bool:
    """True when GET `url` answers 200 now (a readiness or health endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (OSError, ValueError):  # refused, reset, timed out, an HTTP error status
        return False


def wait_for_http_ok(
    url: str,
    timeout_s: float,
    process: subprocess.Popen | None = None,
    interval_s: float = 0.2,
    stop: threading.Event | None = None,
) -> bool:
    """True once GET `url` answers 200 within `timeout_s`; False at the deadline, as soon
    as `process` (the server behind the URL, when we started it) has exited, or once
    `stop` is set. The one readiness poll of the project: Triton, the gateway and the
    servers a benchmark compares with are all waited for here."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        if process is not None and process.poll() is not None:
            return False
        if http_ok(url):
            return True
        if stop is not None:
            stop.wait(interval_s)
        else:
            time.sleep(interval_s)
    return False

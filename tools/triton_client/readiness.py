"""Readiness polling: is an HTTP endpoint up, and wait until it is.

It lives with the client, as pytriton's does: the launchers (Triton, the gateway, the
servers a benchmark compares with) use the client package to wait for what they started,
never the reverse.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request


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

"""Stop a child's whole process group in escalating steps.

Triton, the gateway and the servers a benchmark compares with all run in their own
session, so a terminal's Ctrl-C does not reach them twice and every process they fork
(Triton's backend stubs, uvicorn's workers) goes with them. One implementation of the
escalation serves every launcher; the readiness poll is tools/triton_client/readiness.py.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
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

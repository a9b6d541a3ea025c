"""Exit statuses shared by the long-running commands (tune, adapt, bench-adapt).

Failures a user can act on end with one error line and a non-zero status instead of a
traceback: 1 when no server could be had, 2 for bad arguments, keys or reloads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tools.serve.admin_key import AdminKeyError
from tools.serve.local_triton import TritonStartError
from tools.triton_client import TritonError


def run_reporting_errors(action: Callable[[], int], log: logging.Logger) -> int:
    try:
        return action()
    except TritonStartError as exc:
        log.error("%s", exc)
        return 1
    except (ValueError, TritonError, AdminKeyError, OSError) as exc:
        log.error("%s", exc)
        return 2

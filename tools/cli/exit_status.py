"""Exit statuses shared by the long-running commands (tune, adapt, bench-adapt).

Failures a user can act on end with one error line and a non-zero status instead of a
traceback: 1 when no server could be had, 2 for bad arguments, keys or reloads. The
errors say which they are by their base class, declared here at the bottom layer, so
this module needs to know nothing of the layers that raise them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable


class NoServerError(RuntimeError):
    """No server could be had (it did not start): exit status 1."""


class ActionableError(RuntimeError):
    """A request the user can correct was refused (a reload, a key, an endpoint): exit status 2."""


def run_reporting_errors(action: Callable[[], int], log: logging.Logger) -> int:
    try:
        return action()
    except NoServerError as exc:
        log.error("%s", exc)
        return 1
    except (ValueError, ActionableError, OSError) as exc:  # AdminKeyError is a ValueError
        log.error("%s", exc)
        return 2

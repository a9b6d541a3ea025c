"""One classification of request outcomes, for every load tool and the locust verdict.

Rejections (queue full) and queue timeouts are Triton shedding load by policy, not bugs,
so they are counted apart from other errors; a client-side deadline is the client giving
up, which says nothing about what the server decided.
"""

from __future__ import annotations

OK = "ok"
REJECTED = "rejected"  # the queue policy refused it: "Exceeds maximum queue size"
TIMEOUT = "timeout"  # the queue policy timed it out: "Request timeout expired"
CLIENT_TIMEOUT = "client_timeout"  # the client's own deadline ran out (ours, or gRPC's DEADLINE_EXCEEDED)
UNAVAILABLE = "unavailable"  # no connection to the server
ERROR = "error"  # anything else: bad input, a failed execution

SHED = (REJECTED, TIMEOUT)

# Lower-case markers in Triton's and the clients' messages, checked in this order.
_MARKERS = (
    (REJECTED, ("exceeds maximum queue size", "queue size")),
    (TIMEOUT, ("request timeout expired",)),
    (CLIENT_TIMEOUT, ("deadline exceeded", "deadline", "timed out")),
    (TIMEOUT, ("timeout",)),
    (UNAVAILABLE, ("unavailable", "connect")),
)


def classify(message: str) -> str:
    """The outcome a failed request's error message stands for."""
    text = message.lower()
    for outcome, markers in _MARKERS:
        if any(marker in text for marker in markers):
            return outcome
    return ERROR


def error_message(exc: BaseException) -> str:
    """tritonclient's InferenceServerException keeps its text in message(); others in str()."""
    message = exc.message() if callable(getattr(exc, "message", None)) else str(exc)
    return message or type(exc).__name__


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(outcome, message) of an exception raised by a send."""
    message = error_message(exc)
    return classify(message), message

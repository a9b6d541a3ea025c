"""Errors in OpenAI's format, and how Triton's gRPC errors map onto HTTP statuses.

OpenAI clients (the `openai` package, LangChain) read `{"error": {"message", "type",
"param", "code"}}` and retry on 429/5xx by status, honouring `Retry-After`; so every
failure leaves the gateway in that shape with the status a client can act on, never as
a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.utils import InferenceServerException

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
RATE_LIMIT = "rate_limit_error"
SERVER_ERROR = "server_error"
UNAVAILABLE = "service_unavailable"
TIMEOUT = "timeout"


@dataclass
class APIError(Exception):
    """An answer other than 200; `body()` is what the client receives."""

    status: int
    message: str
    type: str = INVALID_REQUEST
    param: str | None = None
    code: str | None = None
    retry_after_s: int | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.code or self.type}: {self.message}"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return headers


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, INVALID_REQUEST, param, code)


# gRPC's words for a connection that went away under a call (e.g. Triton's gRPC server
# closing a connection after many cancelled streams): the call never reached the model.
_DROPPED_CONNECTION = ("stream removed", "socket closed", "connection reset", "goaway", "broken pipe")


def connection_dropped(exc: InferenceServerException) -> bool:
    """True when the call failed because its connection dropped, not because Triton refused it:
    safe to send again, since an embedding has no side effect."""
    text = (exc.message() or str(exc)).lower()
    return "UNAVAILABLE" in str(exc.status() or "") and any(words in text for words in _DROPPED_CONNECTION)


def from_triton(exc: InferenceServerException, retry_after_s: int) -> APIError:
    """Triton's answer as the status an OpenAI client expects.

    Classified by gRPC status and by Triton's message, because Triton reports a full
    queue and an expired queue timeout as UNAVAILABLE with a message, not a status of
    their own."""
    status = str(exc.status() or "")
    message = exc.message() or str(exc)
    text = message.lower()
    if "exceeds maximum queue size" in text:
        return APIError(429, f"Triton's queue is full, retry later ({message})", RATE_LIMIT, None, "queue_full", retry_after_s)
    if "DEADLINE_EXCEEDED" in status or "timeout" in text or "timed out" in text:
        return APIError(504, f"the embedding request timed out in Triton ({message})", TIMEOUT, None, "timeout")
    if "INVALID_ARGUMENT" in status:
        return APIError(400, message, INVALID_REQUEST, "input", "invalid_value")
    if "UNAVAILABLE" in status or "NOT_FOUND" in status or "not ready" in text or "unknown model" in text or "stopping" in text:
        return APIError(503, f"Triton is not available: {message}", UNAVAILABLE, None, "triton_unavailable", retry_after_s)
    return APIError(500, f"Triton failed the request: {message}", SERVER_ERROR, None, "triton_error")

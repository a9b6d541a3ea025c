"""What one LLM stream measured, as locust requests: the part of the LLM user that needs no
locust (and so no gevent), kept apart so it is tested on its own."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable

REQUEST_TYPE = "http-stream"


class StreamError(Exception):
    """A failed stream; its repr is the server's message, which locust's failure table shows."""

    def __repr__(self) -> str:
        return str(self)


def token_times(lines: Iterable[bytes | str], clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], str | None]:
    """Arrival times of the events that carried text, and the stream's error (None if none),
    from the lines of a server-sent-event body read as they arrive."""
    times: list[float] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else raw.strip()
        if not line.startswith("data:"):
            continue
        now = clock()
        event = json.loads(line[len("data:") :])
        if "error" in event:
            return times, str(event["error"])
        if event.get("text_output"):
            times.append(now)
    return times, None


def locust_requests(model: str, start: float, times: list[float], end: float, error: str | None) -> list[dict]:
    """The keyword arguments of locust's `events.request.fire` for one stream, in order:
    its first token, each gap between tokens, then the whole request (failed or not)."""

    def timed(kind: str, seconds: float) -> dict:
        return {"request_type": REQUEST_TYPE, "name": f"{model}/{kind}", "response_time": seconds * 1000.0, "response_length": 0}

    events = [timed("ttft", times[0] - start)] if times else []
    events += [timed("itl", later - earlier) for earlier, later in itertools.pairwise(times)]
    events.append(
        {
            "request_type": REQUEST_TYPE,
            "name": f"{model}/e2e",
            "response_time": (end - start) * 1000.0,
            "response_length": len(times),
            "exception": None if error is None else StreamError(error),
        }
    )
    return events

"""Open requests' response senders: counted, and garbage collected when the last one closes.

Triton's Python backend lets a model unload only when every response sender it handed out
is gone, and a sender is gone when its Python object is destroyed, not when FINAL is sent. A
sender caught in a reference cycle (the engine loop's callbacks close over it, and over the
model that holds the loop) lives until the next garbage collection of its generation, which
an idle server may not run for a long time: 6 of 24 reloads in one tuner run and 3 of 8 in
two validation runs waited 120 s for an unload that never finished. Triton's vLLM backend drops its reference
at FINAL and collects garbage when no request is left open; so does the `llm` model, through
this counter and `Responder`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable


class OpenSenders:
    """How many requests still have a sender; `collect` runs when the count returns to 0."""

    def __init__(self, collect: Callable[[], object] = gc.collect) -> None:
        self._collect = collect
        self._lock = threading.Lock()
        self._open = 0

    @property
    def count(self) -> int:
        with self._lock:
            return self._open

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            if self._open <= 0:
                raise RuntimeError("a sender closed that was never opened")
            self._open -= 1
            last = self._open == 0
        if last:
            self._collect()  # outside the lock: a collection can take a few ms


class HeldSender:
    """One request's sender, released (the reference dropped, the count lowered) after its
    FINAL response, so nothing that reaches this holder keeps the sender alive; a send after
    that is refused, and a released sender reads as cancelled (its request is over)."""

    def __init__(self, sender, open_senders: OpenSenders, final_flag: int) -> None:
        self._sender = sender
        self._open_senders = open_senders
        self._final_flag = final_flag
        open_senders.opened()

    @property
    def released(self) -> bool:
        return self._sender is None

    def is_cancelled(self) -> bool:
        sender = self._sender
        return True if sender is None else bool(sender.is_cancelled())

    def send(self, response, final: bool = False) -> None:
        sender = self._sender
        if sender is None:
            raise RuntimeError("this request's FINAL response was already sent")
        try:
            sender.send(response, flags=self._final_flag if final else 0)
        finally:
            if final:
                self._sender = None
                del sender
                self._open_senders.closed()

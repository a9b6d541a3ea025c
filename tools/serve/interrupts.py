"""SIGINT, SIGTERM and SIGHUP stop the Triton servers a command started, then end the command.

Triton runs in its own session (so a terminal's Ctrl-C reaches it only through
`LocalTriton.stop()`, in order), which means that a command killed by SIGTERM (`timeout`,
a CI cancel, `kill`) or SIGHUP used to leave its `tritonserver` and the backend stubs
running, holding ports and CPU. While a server started by `LocalTriton` runs, this module
turns those signals into one exception, `Interrupted`, raised in the main thread: the
`with`/`finally` blocks that stop the server run on the way out, exactly as for Ctrl-C.

`Interrupted` is both a `KeyboardInterrupt` and a `SystemExit`: code that handles Ctrl-C
(the tuner keeps its checkpoint, `tools.adapt` writes its decisions) handles every signal
the same way, and where nothing catches it the interpreter exits with 128 + the signal
number (130, 143, 129) without a traceback, so no entry point needs its own handler.

While an asyncio event loop runs in the main thread, the exception is not raised where
the signal happens to land (inside a coroutine step, or inside native code called back
from Python, such as gRPC's asyncio poller, which it can leave half-done: the suspected
cause of a loadgen that once died of a segmentation fault on SIGTERM right after its load
started) but from a callback of its own, between two callbacks:
`asyncio.run` then cancels the tasks, their `finally` blocks close their channels, and the
exception leaves `asyncio.run` as before. A second signal before that callback ran raises
at once.

Only default handlers are replaced (a command's own handler, or an ignored signal, wins)
and they come back when the last server stops. A second signal while servers are being
stopped kills them at once instead of interrupting the stop half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt, SystemExit):
    """A stop signal arrived while a server of ours ran; uncaught, it exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        KeyboardInterrupt.__init__(self, f"interrupted by {signal.Signals(signum).name}")
        self.code = 128 + signum


def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    """A handler for a command that owns another child process for a while (e.g. locust)."""
    raise Interrupted(signum)


class _Guard:
    """The servers now running (by process-group id) and the handlers we replaced."""

    def __init__(self) -> None:
        self.running: dict[int, bool] = {}  # process group -> being stopped
        self.previous: dict[int, object] = {}
        self.lock = threading.Lock()
        self.deferred: int | None = None  # a signal waiting for the event loop's next callback

    @staticmethod
    def _is_default(signum: int, handler: object) -> bool:
        return handler is (signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        with self.lock:
            stopping = [group for group, is_stopping in self.running.items() if is_stopping]
        if stopping:
            log.warning("%s again while stopping: killing tritonserver now", name)
            for group in stopping:
                _kill_group(group)
            return
        log.warning("%s: stopping the Triton server this command started", name)
        loop = _running_loop()
        if loop is not None and self.deferred is None:
            self.deferred = signum
            loop.call_soon_threadsafe(self._raise_deferred, signum)
            return
        self.deferred = None
        raise Interrupted(signum)

    def _raise_deferred(self, signum: int) -> None:
        """Runs as an event-loop callback, so Interrupted leaves `run_forever` at a clean point."""
        if self.deferred is None:
            return  # a second signal raised it already
        self.deferred = None
        raise Interrupted(signum)

    def add(self, group: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals are delivered to the main thread; its own server, if any, installs the handlers
        with self.lock:
            if not self.running:
                for signum in SIGNALS:
                    current = signal.getsignal(signum)
                    if self._is_default(signum, current):
                        self.previous[signum] = current
                        signal.signal(signum, self.handle)
            self.running[group] = False

    def stopping(self, group: int) -> None:
        with self.lock:
            if group in self.running:
                self.running[group] = True

    def remove(self, group: int) -> None:
        with self.lock:
            if self.running.pop(group, None) is None or self.running:
                return
            if threading.current_thread() is not threading.main_thread():
                return
            for signum, handler in self.previous.items():
                if signal.getsignal(signum) == self.handle:  # a command that took the signal over keeps it
                    signal.signal(signum, handler)
            self.previous.clear()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this (the main) thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_guard = _Guard()
watch_server: Callable[[int], None] = _guard.add
server_stopping: Callable[[int], None] = _guard.stopping
server_stopped: Callable[[int], None] = _guard.remove


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the block as Ctrl-C does, for a command that changes a server
    it did not start (`tools.tune --url` reloading a remote model): its `finally` blocks
    then put the server back, which a plain SIGTERM would skip. Default handlers only."""
    replaced = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is signal.SIG_DFL:
                replaced[signum] = signal.signal(signum, raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in replaced.items():
            signal.signal(signum, handler)

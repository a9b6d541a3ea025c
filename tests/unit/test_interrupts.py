"""Signals while a server of ours runs unwind the command like Ctrl-C, then exit 128 + signum."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tools.paths import REPO_ROOT
from tools.serve.interrupts import Interrupted, _Guard


@pytest.fixture
def guard() -> Iterator[_Guard]:
    """A guard of its own, starting from default handlers: the session's Triton (started by
    other tests in this process) is registered with the module's guard, whose handlers
    stay installed while it runs; they are put back afterwards."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
    saved = {signum: signal.signal(signum, handler) for signum, handler in defaults.items()}
    yield _Guard()
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def group(guard: _Guard) -> Iterator[subprocess.Popen]:
    """A stand-in for tritonserver: a process in its own session, as LocalTriton starts it."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()
    guard.remove(process.pid)


def test_sigterm_while_a_server_runs_raises_interrupted_and_the_handlers_come_back(group, guard) -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    guard.add(group.pid)
    with pytest.raises(KeyboardInterrupt) as raised:  # the Ctrl-C path of every command
        os.kill(os.getpid(), signal.SIGTERM)
    assert isinstance(raised.value, Interrupted) and isinstance(raised.value, SystemExit)
    assert raised.value.code == 128 + signal.SIGTERM
    guard.remove(group.pid)
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_a_handler_the_command_installed_is_left_alone(group, guard) -> None:
    own = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        mine = signal.getsignal(signal.SIGTERM)
        guard.add(group.pid)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        guard.remove(group.pid)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, own)


def test_a_second_signal_while_stopping_kills_the_server_instead_of_interrupting_the_stop(group, guard) -> None:
    guard.add(group.pid)
    guard.stopping(group.pid)
    os.kill(os.getpid(), signal.SIGTERM)  # handled without an exception
    assert group.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_uncaught_it_exits_with_128_plus_the_signal_and_no_traceback(signum: int) -> None:
    code = f"from tools.serve.interrupts import Interrupted\nraise Interrupted({int(signum)})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 128 + signum
    assert result.stderr == ""


def test_a_signal_inside_an_event_loop_unwinds_between_callbacks_and_lets_cleanup_finish(group, guard) -> None:
    """The signal never lands inside a coroutine step (or a native library's callback, such
    as gRPC's asyncio poller): the step in progress completes, then asyncio.run cancels the
    tasks, their `finally` blocks await their cleanup, and Interrupted leaves asyncio.run."""
    guard.add(group.pid)
    steps: list[str] = []

    async def client() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("step completed")  # a half-done step is what crashed gRPC's poller
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0)  # e.g. closing a gRPC channel
            steps.append("cleanup awaited")

    with pytest.raises(Interrupted) as raised:
        asyncio.run(client())
    assert raised.value.code == 128 + signal.SIGTERM
    assert steps == ["step completed", "cleanup awaited"]


def test_a_second_signal_before_the_loop_got_to_the_first_raises_at_once(group, guard) -> None:
    guard.add(group.pid)

    async def blocked() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # deferred to the loop's next callback
        os.kill(os.getpid(), signal.SIGTERM)  # the loop never got there: raised here

    with pytest.raises(Interrupted):
        asyncio.run(blocked())

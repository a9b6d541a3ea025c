"""A stop signal that lands inside a step of the load's event loop (as SIGTERM does while the
tuner's load is being set up) ends the command quietly: the exception leaves the load with
the signal's exit status, and asyncio logs no "Task exception was never retrieved" traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import subprocess
import sys

import pytest

from tools.load.driver import run_until_complete
from tools.paths import REPO_ROOT
from tools.serve.interrupts import Interrupted


async def setting_up_when_the_signal_lands() -> None:
    clients = [asyncio.create_task(asyncio.sleep(30)) for _ in range(2)]
    await asyncio.sleep(0)
    raise Interrupted(signal.SIGTERM)  # where tools.serve.interrupts raises it: inside this step
    await asyncio.gather(*clients)


async def a_client_task_hit_by_the_signal() -> None:
    async def client() -> None:
        raise Interrupted(signal.SIGTERM)

    await asyncio.gather(client(), asyncio.sleep(30))


@pytest.mark.parametrize("load", [setting_up_when_the_signal_lands, a_client_task_hit_by_the_signal])
def test_a_signal_inside_a_load_step_leaves_with_its_status_and_no_traceback(load, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    with pytest.raises(Interrupted) as raised:
        run_until_complete(load())
    code = raised.value.code
    del raised  # its traceback keeps the tasks alive
    gc.collect()  # an unretrieved task exception is logged when the task is collected
    assert code == 128 + signal.SIGTERM
    assert [record.getMessage() for record in caplog.records if record.exc_info] == []


def test_other_task_errors_are_still_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def forgotten() -> None:
        raise RuntimeError("lost")

    async def load() -> None:
        asyncio.get_running_loop().create_task(forgotten())
        await asyncio.sleep(0.01)

    caplog.set_level(logging.ERROR, logger="asyncio")
    run_until_complete(load())
    gc.collect()
    assert any("never retrieved" in record.getMessage() for record in caplog.records)


SIGNALLED_LOAD = """
import asyncio, os, signal, subprocess
from tools.load.driver import Prepared, drive
from tools.load.schedules import ClosedLoop, Phase
from tools.serve.interrupts import server_stopped, watch_server

class Sender:
    async def open(self): pass
    async def close(self): await asyncio.sleep(0)
    async def send(self, prepared): await asyncio.sleep(0.01)
    def prepare(self, request):
        os.kill(os.getpid(), signal.SIGTERM)  # every client's first request: a second signal lands inside a step
        return Prepared(request, "m")

stand_in = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a server of ours, as LocalTriton registers it
watch_server(stand_in.pid)
try:
    drive(Sender(), [Phase(ClosedLoop(4), 3.0)])
finally:
    stand_in.kill()
    stand_in.wait()
    server_stopped(stand_in.pid)
"""


def test_sigterm_while_a_load_sets_up_ends_the_process_with_143_and_no_traceback() -> None:
    """The tuner's case, end to end: real signals through tools.serve.interrupts' handler
    while the load's clients start (without run_until_complete's handler asyncio printed
    "Task exception was never retrieved" and a traceback)."""
    result = subprocess.run([sys.executable, "-c", SIGNALLED_LOAD], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr, result.stderr

"""A stop signal that lands inside a step of the load's event loop (as SIGTERM does while the
tuner's load is being set up) ends the command quietly: the exception leaves the load with
the signal's exit status, and asyncio logs no "Task exception was never retrieved" traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

import pytest

from tools.load.driver import run_until_complete
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

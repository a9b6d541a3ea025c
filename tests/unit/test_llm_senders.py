"""The `llm` model's response senders: released at FINAL, garbage collected when none is open."""

from __future__ import annotations

import gc
import weakref

import pytest

from llm.serving.senders import HeldSender, OpenSenders

FINAL = 1


class Sender:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, int]] = []
        self.fail = fail

    def send(self, response, flags: int = 0) -> None:
        if self.fail:
            raise RuntimeError("the stub lost its server")
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return False


def test_the_collection_runs_once_when_the_last_open_request_sends_its_final_response():
    collections = []
    open_senders = OpenSenders(collect=lambda: collections.append(open_senders.count))
    first, second = HeldSender(Sender(), open_senders, FINAL), HeldSender(Sender(), open_senders, FINAL)
    assert open_senders.count == 2
    first.send("a")
    first.send("b", final=True)
    assert collections == []  # the second is still open
    second.send("c", final=True)
    assert collections == [0]
    assert first.released and second.released


def test_a_final_response_drops_the_holders_reference_so_a_cycle_through_the_holder_keeps_no_sender_alive():
    gc.disable()
    try:
        open_senders = OpenSenders()
        sender = Sender()
        held = HeldSender(sender, open_senders, FINAL)
        sender.cycle = held  # the sender reaches its holder: a cycle, as closures over it make
        alive = weakref.ref(sender)
        del sender
        held.send("last", final=True)  # the count returns to 0: gc.collect() runs
        del held
        assert alive() is None
    finally:
        gc.enable()


def test_nothing_is_sent_after_the_final_response_and_a_failed_final_send_still_releases():
    open_senders = OpenSenders(collect=lambda: None)
    held = HeldSender(Sender(), open_senders, FINAL)
    held.send("done", final=True)
    with pytest.raises(RuntimeError, match="already sent"):
        held.send("late")
    broken = HeldSender(Sender(fail=True), open_senders, FINAL)
    with pytest.raises(RuntimeError, match="lost its server"):
        broken.send("done", final=True)
    assert broken.released and open_senders.count == 0
    with pytest.raises(RuntimeError, match="never opened"):
        open_senders.closed()


def test_the_final_flag_goes_only_with_the_final_response_and_a_released_sender_reads_as_cancelled():
    sender = Sender()
    held = HeldSender(sender, OpenSenders(collect=lambda: None), FINAL)
    held.send("token")
    assert not held.is_cancelled()
    held.send("end", final=True)
    assert sender.sent == [("token", 0), ("end", FINAL)]
    assert held.is_cancelled()

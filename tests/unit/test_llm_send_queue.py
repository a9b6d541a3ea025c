"""SendQueue: responses leave in the order queued, off the caller's thread, and one failing
send does not stop the others."""

from __future__ import annotations

import threading

from llm.serving.send_queue import SendQueue


def test_sends_run_in_order_on_another_thread_and_close_drains_them() -> None:
    sent: list[tuple[int, int]] = []
    release = threading.Event()
    sends = SendQueue()
    sends.put(lambda: release.wait(10))  # holds the thread: the puts below must not block on it
    for i in range(50):
        sends.put(lambda i=i: sent.append((i, threading.get_ident())))
    assert sent == []
    release.set()
    assert sends.close(timeout_s=10)
    assert [i for i, _ in sent] == list(range(50))
    assert {thread for _, thread in sent} != {threading.get_ident()}


def test_a_failing_send_is_logged_and_the_next_ones_still_go(caplog) -> None:
    sent: list[str] = []

    def broken() -> None:
        raise RuntimeError("the stream is closed")

    sends = SendQueue()
    sends.put(lambda: sent.append("before"))
    sends.put(broken)
    sends.put(lambda: sent.append("after"))
    assert sends.close(timeout_s=10)
    assert sent == ["before", "after"]
    assert "sending a response failed" in caplog.text

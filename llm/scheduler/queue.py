"""The waiting queue, ordered by the policy's key so a preempted sequence keeps its place."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from llm.scheduler.request import Request

POLICIES = ("fcfs", "priority")

OrderKey = tuple[float, ...]


def order_key(policy: str) -> Callable[[Request], OrderKey]:
    """fcfs: arrival (then admission order); priority: lower `priority` first, then arrival.
    The running sequence with the largest key is the preemption victim."""
    if policy == "fcfs":
        return lambda seq: (seq.request.arrival_time, seq.seq_id)
    if policy == "priority":
        return lambda seq: (seq.request.params.priority, seq.request.arrival_time, seq.seq_id)
    raise ValueError(f"unknown scheduling policy {policy!r}; expected one of {', '.join(POLICIES)}")


class WaitingQueue:
    """Sorted by key: a requeued (preempted) sequence lands ahead of every later arrival."""

    def __init__(self, policy: str) -> None:
        self._key = order_key(policy)
        self._items: list[tuple[OrderKey, Request]] = []

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return (seq for _, seq in self._items)

    def add(self, seq: Request) -> None:
        bisect.insort(self._items, (self._key(seq), seq), key=lambda item: item[0])

    def peek(self) -> Request:
        return self._items[0][1]

    def pop(self) -> Request:
        return self._items.pop(0)[1]

    def remove(self, seq: Request) -> None:
        self._items = [item for item in self._items if item[1] is not seq]

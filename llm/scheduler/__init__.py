"""Continuous-batching scheduler: KV blocks, requests, the waiting queue and each step's
SchedulerOutput."""

from llm.scheduler.block_manager import BlockManager, blocks_for
from llm.scheduler.queue import POLICIES, WaitingQueue
from llm.scheduler.request import Request, RequestStatus
from llm.scheduler.scheduler import MODES, Scheduler, SchedulerOutput

__all__ = [
    "MODES",
    "POLICIES",
    "BlockManager",
    "Request",
    "RequestStatus",
    "Scheduler",
    "SchedulerOutput",
    "WaitingQueue",
    "blocks_for",
]

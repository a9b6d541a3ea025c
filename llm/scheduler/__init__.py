"""Continuous-batching scheduler: KV blocks, sequences, the waiting queue and the step planner."""

from llm.scheduler.block_manager import BlockManager, blocks_for
from llm.scheduler.queue import POLICIES, WaitingQueue
from llm.scheduler.scheduler import MODES, Scheduler, StepPlan
from llm.scheduler.sequence import Sequence, SequenceStatus

__all__ = [
    "MODES",
    "POLICIES",
    "BlockManager",
    "Scheduler",
    "Sequence",
    "SequenceStatus",
    "StepPlan",
    "WaitingQueue",
    "blocks_for",
]

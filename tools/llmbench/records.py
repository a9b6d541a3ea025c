"""Moved to tools.load.llm.records (the load layer owns LLM streaming load); this name stays
until tools.llmbench's own modules import from there."""

from tools.load.llm.records import CUT, StreamRecord

__all__ = [
    "CUT",
    "StreamRecord",
]

"""Moved to tools.load.llm.figures (the load layer owns LLM streaming load); this name stays
until tools.llmbench's own modules import from there."""

from tools.load.llm.figures import LevelFigures, Slo

__all__ = [
    "LevelFigures",
    "Slo",
]

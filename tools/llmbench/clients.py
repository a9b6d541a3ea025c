"""Moved to tools.load.llm.clients (the load layer owns LLM streaming load); this name stays
until tools.llmbench's own modules import from there."""

from tools.load.llm.clients import NOT_FINISHED, OpenAIStreamClient, StreamClient, StreamError, TritonStreamClient, sampling_parameters

__all__ = [
    "NOT_FINISHED",
    "OpenAIStreamClient",
    "StreamClient",
    "StreamError",
    "TritonStreamClient",
    "sampling_parameters",
]

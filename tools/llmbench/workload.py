"""Moved to tools.load.llm.workload (the load layer owns LLM streaming load); this name stays
until tools.llmbench's own modules import from there."""

from tools.load.llm.workload import GGUF_NAME, SENTENCES, LengthRange, LlmRequest, Tokenizer, Workload, gguf_path, mean_lengths

__all__ = [
    "GGUF_NAME",
    "SENTENCES",
    "LengthRange",
    "LlmRequest",
    "Tokenizer",
    "Workload",
    "gguf_path",
    "mean_lengths",
]

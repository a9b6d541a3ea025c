"""The Llama forward with a paged KV cache: one torch forward per scheduler step.

`LlamaExecutor.from_checkpoint(folder, EngineConfig)` implements `llm.contract.StepExecutor`.
The checkpoint (written by `python -m export`) holds already-fused weights under our own
tensor names, so loading is a file read, not a dequantisation.
"""

from llm.engine.checkpoint import LlamaDims, load_checkpoint, save_checkpoint
from llm.engine.executor import LlamaExecutor

__all__ = ["LlamaDims", "LlamaExecutor", "load_checkpoint", "save_checkpoint"]

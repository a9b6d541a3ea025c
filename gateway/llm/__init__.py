"""The gateway's LLM side: completions and chat requests, their answers, chat prompts, LoRA
adapter names, the bound on open generations and the gRPC stream into Triton's `llm` model."""

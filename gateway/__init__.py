"""OpenAI-compatible gateway in front of Triton (`python -m gateway`): embeddings, completions, chat."""

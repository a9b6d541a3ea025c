"""OpenAI-compatible embeddings gateway in front of Triton (`python -m gateway`)."""

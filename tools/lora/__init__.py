"""LoRA adapters for the `llm` model: made here (no adapter can be downloaded), listed in the
model version folder's multi_lora.json (llm/engine/lora.py reads them)."""

"""Export a sentence-transformers model to the Triton model repository (ONNX, parity-checked)."""

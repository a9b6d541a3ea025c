"""The tensor names the exported encoder, the configs, the ensemble and the load tools share.

Kept apart from export/onnx_graph.py (which defines the graph with them) so that clients
can import the names without importing torch.
"""

INPUT_NAMES = ("INPUT_IDS", "ATTENTION_MASK")  # the encoder's token ids and attention mask (INT64)
OUTPUT_NAME = "EMBEDDING"  # the sentence embedding (FP32), of the encoder and of the embed ensemble
TEXT_INPUT = "TEXT"  # the embed ensemble's (and the tokenizer's) input: texts (BYTES)

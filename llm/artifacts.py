"""The files `python -m export` writes into the LLM's version folder.

Torch-free on purpose: the repository check (`tools/repo/artifacts.py`) lists them without
importing the engine.
"""

CONFIG_FILE = "llm_config.json"  # the model's dimensions (llm.engine.checkpoint.LlamaDims)
WEIGHTS_FILE = "model.safetensors"  # fused weights under our tensor names
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"  # special tokens (transformers' save_pretrained layout)
CHAT_TEMPLATE_FILE = "chat_template.jinja"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)

# The Hugging Face-format checkpoint vLLM serves (bfloat16, from the same GGUF), in a folder of its
# own inside the version folder, with its own manifest: `make export` writes it behind vLLM's gate.
HF_FOLDER = "hf"
HF_REQUIRED_FILES = ("config.json", "model.safetensors", TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)

"""Repository locations shared by the tools, the export step and the tests."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
BUILD_DIR = REPO_ROOT / "build"
BACKENDS_SOURCE = REPO_ROOT / "backends"  # code that runs inside Triton
VLLM_VENV = REPO_ROOT / ".venv-vllm"  # vLLM's own environment (make vllm-venv; requirements-vllm.txt)
VLLM_PYTHON = VLLM_VENV / "bin" / "python"

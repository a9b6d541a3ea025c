"""Which engine serves the generative model `llm` when a command starts its own Triton.

The model folder holds one config per engine: config.pbtxt (native: our engine) and
configs/vllm.pbtxt (vLLM's V1 engine in .venv-vllm). Triton's `--model-config-name=vllm` picks
the second for `llm` and leaves every other model on its config.pbtxt, so an engine is a
server option, not a second repository. Every command that starts a server takes
`--llm-engine`, and the Makefile passes LLM_ENGINE.
"""

from __future__ import annotations

import argparse

LLM_ENGINES = ("native", "vllm")
CONFIG_NAMES: dict[str, str | None] = {"native": None, "vllm": "vllm"}
# vLLM compiles the model at its first start (about a minute on 2 cores, more on a busy machine)
READY_TIMEOUT_S: dict[str, float] = {"native": 180.0, "vllm": 900.0}


def add_llm_engine_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--llm-engine",
        choices=LLM_ENGINES,
        default="native",
        help="the engine of the generative model `llm` when a server is started: native (config.pbtxt) or vllm "
        "(configs/vllm.pbtxt: vLLM's V1 engine, `make vllm-venv`) (default: %(default)s)",
    )


def config_name_for(engine: str) -> str | None:
    """Triton's --model-config-name for `engine` (None: config.pbtxt)."""
    if engine not in CONFIG_NAMES:
        raise ValueError(f"unknown LLM engine {engine!r}; choose one of {', '.join(LLM_ENGINES)}")
    return CONFIG_NAMES[engine]

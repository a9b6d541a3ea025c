"""vLLM's greedy tokens for the export's parity gate, run in .venv-vllm:

    .venv-vllm/bin/python -m llm.vllm_engine.greedy --model DIR --out tokens.json < request.json

Reads {"prompts": [[token ids], ...], "new_tokens": N, "parameters": {the vLLM config's
parameters}} on standard input (the export reads the config through Triton's protobuf schema,
which this environment lacks) and writes to --out (vLLM logs on standard output)
{"tokens": [[N token ids], ...], "seconds": s, "vllm": version} on standard output. The engine is
built from the served config's knobs (dtype, block size, compilation, ...), so the gate checks
the tokens that serving produces; every prompt is sent at once, so they share steps as served
requests do. The comparison with transformers runs in the export's own environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def greedy_tokens(model: Path, parameters: dict[str, str], prompts: list[list[int]], new_tokens: int) -> dict:
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm import __version__ as vllm_version

    from llm.vllm_engine.knobs import SERVER_ENVIRONMENT, VllmKnobs

    for key, value in SERVER_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    knobs = VllmKnobs.from_parameters(parameters)
    started = time.perf_counter()
    engine = LLM(**knobs.engine_args(model), disable_log_stats=True)
    sampling = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    outputs = engine.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], sampling, use_tqdm=False)
    return {
        "tokens": [list(output.outputs[0].token_ids) for output in outputs],
        "seconds": round(time.perf_counter() - started, 2),
        "vllm": vllm_version,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="the Hugging Face checkpoint folder")
    parser.add_argument("--out", type=Path, required=True, help="where the tokens go (JSON)")
    args = parser.parse_args()
    request = json.load(sys.stdin)
    result = greedy_tokens(args.model, request["parameters"], request["prompts"], int(request["new_tokens"]))
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()

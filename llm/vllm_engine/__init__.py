"""vLLM's V1 engine as the `llm` model's engine (parameters.engine = vllm).

Only `knobs` and `convert` import nothing of vLLM: the tools, the export and the tests read them
from the project's environment. The rest runs in .venv-vllm (the model's stub, the parity gate,
the step recorder)."""

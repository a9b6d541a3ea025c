# LoRA adapters trained here for the `llm` model (tools/lora/train.py, docs/llm.md#lora-adapters-several-fine-tunes-in-one-step).
#   make adapters                               shout, json and pirate next to the model, listed in its multi_lora.json (~10 min on 2 cores, once)
#   make adapters ADAPTERS_ARGS="--styles pirate --steps 40"
# `make serve` and `make test` train them when missing; the quality report is the stamp.
ADAPTERS_ARGS ?=
ADAPTERS_REPORT := model_repository/llm/1/adapters/quality.json

.PHONY: adapters

adapters: $(ADAPTERS_REPORT) ## train the LoRA adapters (shout, json, pirate) with PEFT and list them for `llm` (no-op once trained; ADAPTERS_ARGS)

$(ADAPTERS_REPORT): tools/lora/train.py tools/lora/styles.py | $(STAMP)
	$(PY) -m tools.lora.train $(ADAPTERS_ARGS)

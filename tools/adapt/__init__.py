"""An SLO-driven controller that retunes the dynamic batcher's delay while traffic changes.

`python -m tools.adapt` (`__main__`) runs it. `control` holds the control law (pure, no
server); `observe` turns Triton's statistics into per-window observations; `live` runs the
law against a server and applies changes through the model-control API; `replay` and
`evaluate` compare it with static configs. `llm/` is the same for the generative model `llm`
(its token budget and max-wait against a TTFT/TPOT SLO).
"""

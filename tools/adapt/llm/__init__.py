"""The LLM side of adapt: the token budget and max-wait of the `llm` model moved live against a
TTFT/TPOT p99 SLO (`python -m tools.adapt --model llm`, docs/adapt.md "The LLM").

`control` holds the law (pure, no server); `windows` turns stream records and histograms into
its observations; `live` runs it against a server through the live control request; `bench`
sets it against static settings on one trace, `report` writes its tables; `settings` and
`cli` are the command.
"""

"""The locust users of the generative `llm` model: its locustfile, the streaming user and what
one stream measured (docs/decisions/llm-tooling-layout.md)."""

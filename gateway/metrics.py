"""The gateway's own Prometheus metrics, served at its `/metrics` beside Triton's.

Triton's metrics say what the model did; these say what clients saw at the HTTP edge
(status codes, time including JSON and the gRPC hop) and how much text came in. Each
app gets its own registry, so several gateways in one process (tests) do not collide.
Label values are bounded: the route template, never the raw path.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds; from a cached answer (~1 ms) to the default request timeout (30 s).
LATENCY_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gateway_requests", "HTTP requests answered, by route and status", ("route", "method", "status"), registry=self.registry
        )
        self.latency = Histogram(
            "gateway_request_duration_seconds",
            "Time from request to response, by route",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "gateway_errors", "Error answers, by status and OpenAI error code", ("status", "code"), registry=self.registry
        )
        self.inputs = Counter("gateway_embedding_inputs", "Texts embedded", registry=self.registry)
        self.tokens = Counter("gateway_prompt_tokens", "Tokens counted in embedded texts (usage.prompt_tokens)", registry=self.registry)
        self.triton_requests = Counter(
            "gateway_triton_requests", "Requests sent to Triton (a large input is split into several)", registry=self.registry
        )

        self.generations = Counter(
            "gateway_llm_generations", "LLM generations started, by route kind and streaming", ("kind", "stream"), registry=self.registry
        )
        self.cancelled_generations = Counter(
            "gateway_llm_cancelled_generations", "LLM generations cancelled because the client went away", registry=self.registry
        )
        self.prompt_tokens_llm = Counter("gateway_llm_prompt_tokens", "Prompt tokens of finished LLM generations", registry=self.registry)
        self.open_generations = Gauge(
            "gateway_llm_open_generations", "LLM generations open now (bounded by --llm-max-streams)", registry=self.registry
        )
        self.completion_tokens = Counter("gateway_llm_completion_tokens", "Tokens the LLM generated for clients", registry=self.registry)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def error(self, status: int, code: str | None) -> None:
        self.errors.labels(str(status), code or "none").inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

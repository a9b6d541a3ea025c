"""Use a running Triton, or start the local one for the duration of a command.

The load generator, the tuner and the benchmark all accept `--url host:http_port`
(plus an optional gRPC port); without it they start their own local server on free
ports, so a one-off command never collides with a `make serve` already running.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.contract import LLM_MODEL, grpc_url_beside
from tools.paths import BUILD_DIR, MODEL_REPOSITORY
from tools.ports import free_ports
from tools.repo.view import repository_without
from tools.serve.local_triton import LocalTriton, ServerOptions, TritonStartError, triton_client
from tools.triton_client import TritonClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoints:
    http_url: str
    grpc_url: str
    admin_key: str | None = field(default=None, repr=False)  # of the model-control API, when restricted
    metrics_url: str | None = None  # Prometheus endpoint; known for a server started here

    def url_for(self, protocol: str) -> str:
        return self.http_url if protocol == "http" else self.grpc_url

    @property
    def client(self) -> TritonClient:
        """Model control, readiness, statistics and metrics of this server."""
        return triton_client(self.http_url, self.admin_key, self.metrics_url)


@contextlib.contextmanager
def triton_endpoints(
    url: str | None,
    grpc_url: str | None = None,
    explicit_control: bool = False,
    admin_key: str | None = None,
    serve_llm: bool = False,
    **overrides,
) -> Iterator[Endpoints]:
    """Yield endpoints of a ready server: the one at `url` (whose model-control key, if
    any, is `admin_key`), or a local one started here (with a fresh key of its own), which
    leaves the LLM out unless `serve_llm` (the embedding tools have no use for it)."""
    if url:
        if not TritonClient(url).server_ready():
            raise TritonStartError(f"no ready Triton answers at http://{url}")
        yield Endpoints(url, grpc_url or grpc_url_beside(url), admin_key)
        return
    http, grpc, metrics = free_ports(3)
    if not serve_llm:
        repository = overrides.get("model_repository", MODEL_REPOSITORY)
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        view = Path(tempfile.mkdtemp(prefix=f"models-{http}-", dir=BUILD_DIR))
        overrides["model_repository"] = repository_without(repository, {LLM_MODEL}, view)
    options = ServerOptions(
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        model_control_mode="explicit" if explicit_control else "none",
        load_models=("*",) if explicit_control else (),
        **overrides,
    )
    log_path = BUILD_DIR / f"triton-{http}.log"
    log.info("starting a local Triton on ports %d/%d/%d (log: %s)", http, grpc, metrics, log_path)
    with LocalTriton(options, log_path=log_path).start() as server:
        yield Endpoints(server.options.http_url, server.options.grpc_url, server.admin_key, server.options.metrics_url)

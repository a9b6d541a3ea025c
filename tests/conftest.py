"""Shared fixtures: the real local Triton on free ports, and the reference model."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.contract import LLM_MODEL
from tools.paths import MODEL_REPOSITORY
from tools.ports import free_ports
from tools.repo.artifacts import missing_artifacts
from tools.repo.view import repository_without
from tools.serve.local_triton import LocalTriton, ServerOptions

TESTS_DIR = Path(__file__).resolve().parent
# Test tiers by directory: tests/unit is the fast tier (`make test-unit`: no server, no export,
# no command run as a subprocess); these directories hold the tests that start the real Triton
# or run commands, and every test in them is marked `integration`. tests/ops is the ops tier
# (`make ops-check`, Docker/Kubernetes/Prometheus files), whose server tests carry the marker.
INTEGRATION_DIRS = ("integration", "reliability")
SERVER_FIXTURES = frozenset({"triton", "gateway", "client", "reference_model"})


def pytest_configure(config: pytest.Config) -> None:
    """Give the commands the tests spawn the Ctrl-C a terminal gives them. A shell starts a
    background job with SIGINT ignored, and an ignored signal stays ignored across exec, so
    a run launched as `make test &` would hand every child an ignored SIGINT and the signal
    tests would test the launcher instead. A Python handler is reset to the default at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        if tier in INTEGRATION_DIRS:
            item.add_marker(pytest.mark.integration)
        elif tier == "unit" and SERVER_FIXTURES.intersection(item.fixturenames):
            used = ", ".join(sorted(SERVER_FIXTURES.intersection(item.fixturenames)))
            raise pytest.UsageError(f"{item.nodeid} uses {used}: tests/unit is the tier without servers; move it to tests/integration")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that used a shared server gets the server log's tail in its report: a
    clean-clone CI run keeps nothing else of what the server saw."""
    report = yield
    if report.failed:
        for name in ("llm_triton", "explicit_triton", "vllm_triton", "llm_server"):
            server = getattr(item, "funcargs", {}).get(name)
            if isinstance(server, LocalTriton):
                report.sections.append((f"{name} log (last 60 lines)", server.log_tail(60)))
    return report


def start_triton(log_path: Path, with_llm: bool = False, **overrides) -> LocalTriton:
    """Start Triton on fresh free ports; a failed start raises with the log tail. The LLM
    is left out unless `with_llm`."""
    missing = missing_artifacts(MODEL_REPOSITORY, overrides.get("model_config_name"))
    if not with_llm:
        missing = [path for path in missing if path.relative_to(MODEL_REPOSITORY).parts[0] != LLM_MODEL]
    if missing:
        pytest.fail(f"model repository is not exported ({missing[0]}); run `make export` (make test does it)")
    if not with_llm:
        repository = overrides.get("model_repository", MODEL_REPOSITORY)
        overrides["model_repository"] = repository_without(
            repository, {LLM_MODEL}, Path(tempfile.mkdtemp(prefix="models-", dir=log_path.parent))
        )
    http, grpc, metrics = free_ports(3)
    ready_timeout_s = overrides.pop("ready_timeout_s", 180.0)
    options = ServerOptions(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=5, **overrides)
    return LocalTriton(options, log_path=log_path).start(ready_timeout_s)


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerOptions]:
    """One real Triton for the whole session, serving the committed model repository."""
    server = start_triton(tmp_path_factory.mktemp("triton") / "triton.log")
    try:
        yield server.options
    finally:
        server.stop()


@pytest.fixture(scope="session")
def explicit_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """One server in explicit model-control mode (restricted repository API, admin key) for
    the tests that reload models; each puts the committed configs back when it is done."""
    server = start_triton(tmp_path_factory.mktemp("explicit") / "triton.log", model_control_mode="explicit", load_models=("*",))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llm_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """One real Triton serving only the LLM (explicit model control, `llm` loaded), shared by
    tests/integration/test_llm_*.py."""
    server = start_triton(
        tmp_path_factory.mktemp("llm-triton") / "triton.log", with_llm=True, model_control_mode="explicit", load_models=(LLM_MODEL,)
    )
    try:
        yield server
    finally:
        server.stop()


def start_vllm_triton(log_path: Path, **overrides) -> LocalTriton:
    """Triton serving only `llm` on vLLM's engine (`--model-config-name=vllm`, as `make serve
    LLM_ENGINE=vllm`), explicit model control. vLLM compiles the model at its first start (about
    a minute on 2 cores), hence the wait."""
    return start_triton(
        log_path,
        with_llm=True,
        model_control_mode="explicit",
        load_models=(LLM_MODEL,),
        model_config_name="vllm",
        ready_timeout_s=900,
        **overrides,
    )


@pytest.fixture(scope="session")
def vllm_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """One real Triton serving only the LLM on vLLM's engine, shared by tests/integration/test_llm_vllm*.py."""
    server = start_vllm_triton(tmp_path_factory.mktemp("vllm-triton") / "triton.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["native", "vllm"])
def llm_server(request) -> LocalTriton:
    """The `llm` model on each engine in turn (the session's llm_triton, then vllm_triton): the
    tests using it hold both engines to the same behaviour."""
    return request.getfixturevalue("llm_triton" if request.param == "native" else "vllm_triton")


@pytest.fixture(scope="session")
def reference_model():
    """sentence-transformers' own model: the ground truth for served embeddings."""
    from sentence_transformers import SentenceTransformer

    from export.source_model import default_model_dir

    return SentenceTransformer(str(default_model_dir()), device="cpu")


@pytest.fixture(params=["http", "grpc"])
def client(request, triton):
    """An `embed` client for each protocol: tests using it run over HTTP and gRPC."""
    from tools.embed import EmbeddingClient

    url = triton.http_url if request.param == "http" else triton.grpc_url
    embedding_client = EmbeddingClient(request.param, url)
    yield embedding_client
    embedding_client.close()


def start_gateway(triton_grpc_url: str, log_path: Path, *args: str, env: dict[str, str] | None = None):
    """The OpenAI-compatible gateway as a real server process on a free port (tools.serve.gateway_process)."""
    from tools.serve.gateway_process import GatewayProcess

    (port,) = free_ports(1)
    return GatewayProcess(triton_grpc_url, port=port, extra_args=args, log_path=log_path, env=env).start()


@pytest.fixture(scope="session")
def gateway(triton, tmp_path_factory: pytest.TempPathFactory):
    """One gateway in front of the session's Triton, ready (its /health says so) before use."""
    process = start_gateway(triton.grpc_url, tmp_path_factory.mktemp("gateway") / "gateway.log")
    try:
        if not process.wait_ready(60):
            pytest.fail(f"the gateway never reported Triton ready{process.log_tail()}")
        yield process
    finally:
        process.stop()

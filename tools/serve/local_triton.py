"""Start and stop the real `tritonserver` shipped in the nvidia-pytriton wheel.

The wheel carries a genuine Triton (2.51) binary, its Python backend and a Python
backend stub per Python version. This module assembles a backends folder from those
pieces plus our Python-based `onnxruntime` backend, so configs that say
`platform: "onnxruntime_onnx"` run unchanged here and on NVIDIA's container.
It is used by `python -m tools.serve`, the tests, the tuner and the load tools.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.cli.exit_status import NoServerError
from tools.contract import GRPC_PORT, HTTP_PORT, LLM_MODEL, LOOPBACK, METRICS_PORT
from tools.paths import BACKENDS_SOURCE, BUILD_DIR, MODEL_REPOSITORY
from tools.ports import port_in_use
from tools.repo.artifacts import missing_artifacts, missing_environments
from tools.serve.admin_key import HEADER as ADMIN_HEADER
from tools.serve.admin_key import generate_key, headers_for, redact, restricted_api_flags, write_key_file
from tools.serve.interrupts import server_stopped, server_stopping, watch_server
from tools.serve.process_group import stop_process_group
from tools.serve.triton_console import start_forwarding
from tools.triton_client import TritonClient, TritonError, metric_total

log = logging.getLogger(__name__)


class TritonStartError(NoServerError):
    """Triton could not be started; the message says why (and shows the log tail)."""


@dataclass(frozen=True)
class TritonInstallation:
    """Where the pieces of Triton live inside the nvidia-pytriton wheel."""

    root: Path

    @classmethod
    def find(cls) -> TritonInstallation:
        try:
            import pytriton
        except ImportError as exc:
            raise TritonStartError("nvidia-pytriton is not installed in this environment; run `make venv` first") from exc
        root = Path(pytriton.__file__).resolve().parent / "tritonserver"
        installation = cls(root)
        if not installation.binary.is_file():
            raise TritonStartError(f"tritonserver binary not found at {installation.binary}")
        return installation

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    @property
    def libraries(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    def python_stub(self, version: str = f"{sys.version_info.major}.{sys.version_info.minor}") -> Path:
        stub = self.root / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.is_file():
            raise TritonStartError(f"no Python backend stub for Python {version} in the wheel ({stub})")
        return stub


def assemble_backends(installation: TritonInstallation, destination: Path) -> Path:
    """Build the `--backend-directory`: the wheel's Python backend with the stub for the
    running interpreter, plus each Python-based backend of ours (one folder per backend
    holding a `model.py` and the modules it imports). Rebuilt on every start, so edits to
    our backends apply."""
    if destination.exists():
        shutil.rmtree(destination)
    python_dir = destination / "python"
    python_dir.mkdir(parents=True)
    # Copies, not links: Triton refuses backend libraries that resolve outside the folder.
    for item in installation.python_backend.iterdir():
        if item.is_file():
            shutil.copy2(item, python_dir / item.name)
    shutil.copy2(installation.python_stub(), python_dir / "triton_python_backend_stub")
    for backend in sorted(BACKENDS_SOURCE.iterdir()):
        if (backend / "model.py").is_file():
            target = destination / backend.name
            target.mkdir()
            for module in backend.glob("*.py"):
                if module.name == "__init__.py":  # the package marker for the tests, not the stub
                    continue
                shutil.copy2(module, target / module.name)
    return destination


@dataclass(frozen=True)
class ServerOptions:
    """How to run Triton. Defaults follow Triton's own conventions (ports 8000-8002)
    but bind to loopback only: exposing the server is an explicit choice."""

    model_repository: Path = MODEL_REPOSITORY
    host: str = LOOPBACK
    http_port: int = HTTP_PORT
    grpc_port: int = GRPC_PORT
    metrics_port: int = METRICS_PORT
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    cache_size_bytes: int = 64 * 1024 * 1024
    exit_timeout_s: int = 30
    log_verbose: int = 0
    extra_args: tuple[str, ...] = ()
    work_dir: Path = BUILD_DIR / "triton"
    # Key for the model-control API; None with model control on: a fresh one per start.
    admin_key: str | None = None
    # Triton's --model-config-name: a model with configs/<name>.pbtxt is served from it (the LLM's
    # engine: None keeps config.pbtxt, the native engine; "vllm" serves it on vLLM).
    model_config_name: str | None = None

    @property
    def model_control_enabled(self) -> bool:
        return self.model_control_mode != "none"

    @property
    def ports(self) -> dict[str, int]:
        return {"HTTP": self.http_port, "gRPC": self.grpc_port, "metrics": self.metrics_port}

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


def triton_client(http_url: str, admin_key: str | None = None, metrics_url: str | None = None) -> TritonClient:
    """The one way to build a client for a server whose model-control API may be restricted:
    it carries the key as the header the server was started with (tools/serve/admin_key.py).
    LocalTriton.client and Endpoints.client build theirs here; a read-only caller below the
    serve layer (statistics, readiness, a config) may use TritonClient(http_url) directly."""
    return TritonClient(http_url, headers_for(admin_key), metrics_url)


def server_environment(installation: TritonInstallation) -> dict[str, str]:
    """Environment for tritonserver and its Python stubs: the wheel's bundled libraries,
    this interpreter's libpython first (so stubs embed the same Python as the venv), and
    the venv's site-packages for the stubs' imports (numpy, onnxruntime, tokenizers)."""
    env = dict(os.environ)
    library_dirs = [str(installation.libraries)]
    libpython_dir = sysconfig.get_config_var("LIBDIR")
    if libpython_dir:
        library_dirs.insert(0, libpython_dir)
    if env.get("LD_LIBRARY_PATH"):
        library_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(library_dirs)
    # The stub starts an isolated interpreter (PYTHONPATH is ignored) named "python3" and
    # found on PATH; with this interpreter's bin folder first, a venv's pyvenv.cfg applies
    # and the stub sees the venv's site-packages.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    return env


def build_command(options: ServerOptions, installation: TritonInstallation, backends: Path, admin_key: str | None = None) -> list[str]:
    """The tritonserver command line; with model control on, the repository API needs `admin_key`."""
    if options.model_control_enabled and not admin_key:
        raise TritonStartError("model control is enabled: an admin key must restrict the model-repository API")
    command = [
        str(installation.binary),
        f"--model-repository={options.model_repository}",
        f"--backend-directory={backends}",
        f"--http-address={options.host}",
        f"--http-port={options.http_port}",
        f"--grpc-address={options.host}",
        f"--grpc-port={options.grpc_port}",
        f"--metrics-address={options.host}",
        f"--metrics-port={options.metrics_port}",
        "--allow-gpu-metrics=false",
        f"--model-control-mode={options.model_control_mode}",
        f"--exit-timeout-secs={options.exit_timeout_s}",
        f"--log-verbose={options.log_verbose}",
        "--strict-readiness=true",
    ]
    if options.cache_size_bytes > 0:  # 0: no response cache (Triton refuses a local cache of size 0)
        command += [f"--cache-directory={installation.caches}", f"--cache-config=local,size={options.cache_size_bytes}"]
    if options.model_config_name:
        command.append(f"--model-config-name={options.model_config_name}")
    command += [f"--load-model={name}" for name in options.load_models]
    if admin_key:
        command += restricted_api_flags(admin_key)
    command += list(options.extra_args)
    return command


@dataclass
class LocalTriton:
    """A tritonserver child process. Use as a context manager, or start()/stop()."""

    options: ServerOptions = field(default_factory=ServerOptions)
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, init=False)
    admin_key: str | None = field(default=None, init=False, repr=False)
    admin_key_file: Path | None = field(default=None, init=False)

    def preflight(self) -> None:
        """Fail before starting when the outcome is already known, with a message a user can act on."""
        repository = self.options.model_repository
        if not repository.is_dir():
            raise TritonStartError(f"model repository {repository} does not exist")
        missing = missing_artifacts(repository, self.options.model_config_name)
        if missing:
            names = ", ".join(str(path.relative_to(repository)) for path in missing)
            raise TritonStartError(f"model repository is not exported yet (missing {names}); run `make export`")
        for model, environment in missing_environments(repository, self.options.model_config_name):
            raise TritonStartError(f"model {model} runs in the Python environment {environment}, which is missing; run `make vllm-venv`")
        for name, port in self.options.ports.items():
            if port_in_use(self.options.host, port):
                raise TritonStartError(
                    f"{name} port {port} on {self.options.host} is already in use; stop the other server or choose another port"
                )

    def start(self, ready_timeout_s: float = 180.0) -> LocalTriton:
        self.preflight()
        installation = TritonInstallation.find()
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        backends = assemble_backends(installation, self.options.work_dir / f"backends-{os.getpid()}-{self.options.http_port}")
        if self.options.model_control_enabled:
            self.admin_key = self.options.admin_key or generate_key()
            self.admin_key_file = write_key_file(self.options.work_dir / f"admin-key-{self.options.http_port}", self.admin_key)
            log.info("model-control API restricted; its key is in %s (header %r)", self.admin_key_file, ADMIN_HEADER)
        command = build_command(self.options, installation, backends, self.admin_key)
        log.info("starting %s", " ".join(redact(command, self.admin_key)))
        # A log file gets everything; the console gets it through a filter for the CUDA noise
        # of GPU-less hosts (tools/serve/triton_console.py), unless debug logging asks for all.
        output = open(self.log_path, "wb") if self.log_path else subprocess.PIPE  # noqa: SIM115 - owned by the process
        self._backends = backends
        try:
            self.process = subprocess.Popen(
                command,
                env=server_environment(installation),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # signals reach Triton only through stop(), in order
            )
            if self.log_path:
                output.close()  # the child holds its own descriptor
            if self.process.stdout is not None:
                sink = getattr(sys.stderr, "buffer", None) or os.fdopen(2, "wb", closefd=False)
                self._console = start_forwarding(self.process.stdout, sink, not log.isEnabledFor(logging.DEBUG))
            # From here SIGINT/SIGTERM/SIGHUP unwind the command through stop() (tools/serve/interrupts.py).
            watch_server(self.process.pid)
            self.wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        o = self.options
        log.info("tritonserver (pid %d) ready on ports %d/%d/%d", self.process.pid, o.http_port, o.grpc_port, o.metrics_port)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        if self.client.wait_until_ready(timeout_s, process=self.process):
            return
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise TritonStartError(f"tritonserver exited with status {code} during start-up.\n{self.log_tail()}")
        raise TritonStartError(f"tritonserver was not ready after {timeout_s:.0f} s.\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return "(server output went to the console)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "--- last lines of the Triton log ---\n" + "\n".join(text[-lines:])

    def pending_requests(self) -> int:
        """Requests queued in any model right now (Triton's pending-request gauge)."""
        return int(metric_total(self.client.metrics(), "nv_inference_pending_request_count"))

    def drain(self, timeout_s: float, quiet_polls: int = 5, interval_s: float = 0.05) -> bool:
        """Wait until no model has queued requests (several polls in a row) before stopping.

        Triton's own shutdown finishes the executions in flight but refuses every new
        request at once, and inside an ensemble the hand-over from one step to the next
        is a new request: without this wait, a request between tokenizer and encoder at
        SIGTERM fails with "Server is stopping". True when the queues went quiet in time."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < deadline and self.process is not None and self.process.poll() is None:
            try:
                quiet = quiet + 1 if self.pending_requests() == 0 else 0
            except TritonError:
                return False
            if quiet >= quiet_polls:
                return True
            time.sleep(interval_s)
        return False

    def stop(self) -> int | None:
        """SIGINT (Triton drains in-flight requests up to --exit-timeout-secs), then
        SIGTERM, then SIGKILL; the process group goes too, so no stub outlives it."""
        process = self.process
        if process is None:
            return None
        server_stopping(process.pid)  # a second signal now kills the group instead of interrupting this
        steps = ((signal.SIGINT, self.options.exit_timeout_s + 10), (signal.SIGTERM, 10), (signal.SIGKILL, 10))
        stop_process_group(process, steps, "tritonserver")
        console = getattr(self, "_console", None)
        if console is not None:
            console.join(timeout=5)  # Triton's last lines before ours
            self._console = None
        shutil.rmtree(getattr(self, "_backends", ""), ignore_errors=True)
        if self.admin_key_file:
            self.admin_key_file.unlink(missing_ok=True)
        self.process = None
        server_stopped(process.pid)
        log.info("tritonserver (pid %d) stopped (status %s)", process.pid, process.returncode)
        return process.returncode

    @property
    def client(self) -> TritonClient:
        """Model control (with this server's admin key, generated at start when the options
        gave none), readiness, statistics and metrics."""
        return triton_client(self.options.http_url, self.admin_key, self.options.metrics_url)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> LocalTriton:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


LLM_EXAMPLE = '{"text_input": "What is the capital of France?", "sampling_parameters": "{\\"max_tokens\\": 32}"}'


def describe_endpoints(options: ServerOptions) -> Sequence[str]:
    lines = [
        f"HTTP     http://{options.http_url}   (try: curl {options.http_url}/v2/models/embed/ready)",
        f"gRPC     {options.grpc_url}",
        f"metrics  {options.metrics_url}",
    ]
    if (options.model_repository / LLM_MODEL / "config.pbtxt").is_file():  # the generative model (llm/, docs/llm.md)
        lines += [
            f"LLM      curl -X POST {options.http_url}/v2/models/llm/generate -d '{LLM_EXAMPLE}'",
            f'         streaming: POST .../llm/generate_stream with "stream": true (SSE), or gRPC {options.grpc_url} (stream)',
        ]
    return lines

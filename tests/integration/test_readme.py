"""The README's client examples run verbatim against a real server (ports substituted)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration

README = (REPO_ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def client_commands() -> list[str]:
    lines = [line.strip() for block in code_blocks("bash") for line in block.splitlines()]
    return [line for line in lines if line.startswith(("curl ", ".venv/bin/python -m tools.embed"))]


def on_test_server(text: str, triton) -> str:
    for default, actual in (("8000", triton.http_port), ("8001", triton.grpc_port)):
        text = re.sub(rf"(localhost|127\.0\.0\.1):{default}\b", rf"\g<1>:{actual}", text)
    if ".venv/bin/python -m tools.embed" in text and "--url" not in text:
        port = triton.grpc_port if "--protocol grpc" in text else triton.http_port
        text = text.replace("-m tools.embed", f"-m tools.embed --url 127.0.0.1:{port}", 1)
    return text.replace(".venv/bin/python", sys.executable)


def test_readme_shows_client_commands() -> None:
    commands = client_commands()
    assert any(c.startswith("curl") and "/infer" in c for c in commands)
    assert any("tools.embed" in c for c in commands)


def embedding_commands() -> list[str]:
    """Triton's own endpoints; the gateway's (:8080) run in test_gateway_llm.py."""
    return [command for command in client_commands() if "/models/llm/" not in command and ":8080/" not in command]


@pytest.mark.parametrize("command", embedding_commands())
def test_readme_client_command_works(command: str, triton) -> None:
    result = subprocess.run(on_test_server(command, triton), shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    if "/infer" in command:
        assert '"name":"EMBEDDING"' in result.stdout and '"shape":[2,384]' in result.stdout
    if "/ready" in command:
        assert result.stdout.strip() == "200"


def test_readme_python_example_works(triton) -> None:
    (example,) = [block for block in code_blocks("python") if "InferenceServerClient" in block]
    code = on_test_server(example, triton) + "\nassert embeddings.shape == (2, 384), embeddings.shape\n"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_readme_llm_command_generates_text(llm_triton) -> None:
    (command,) = [command for command in client_commands() if "/models/llm/" in command]
    result = subprocess.run(
        on_test_server(command, llm_triton.options), shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["model_name"] == "llm" and answer["text_output"].startswith("The capital of France is"), answer


def llm_commands() -> list[str]:
    """The README's generative-model lines: Triton's /generate and the gateway's chat."""
    return [command for command in client_commands() if "/models/llm/" in command or "/v1/chat/completions" in command]


def test_serve_with_the_vllm_engine_answers_the_readmes_llm_examples_from_vllm() -> None:
    """`make serve LLM_ENGINE=vllm` is `python -m tools.serve --llm-engine vllm`: the same README
    lines, answered by vLLM (the served config says so), then SIGTERM stops everything."""
    from tests.integration.test_cli import LineCollector
    from tools.ports import free_ports
    from tools.triton_client import TritonClient

    http, grpc, metrics, gateway = free_ports(4)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--gateway-port", str(gateway)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", "--runtime", "local", "--llm-engine", "vllm", *ports, "--exit-timeout", "20"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = LineCollector(process.stderr)
    try:
        output.wait_for("Triton is ready", process, timeout_s=900)
        output.wait_for("gateway metrics", process)
        assert TritonClient(f"127.0.0.1:{http}").config("llm").parameters["engine"].string_value == "vllm"
        for command in [command for command in llm_commands() if '"model": "pirate"' not in command]:  # adapters: enable_lora
            # 127.0.0.1, as the servers bind it: "localhost" may try ::1 first, where anything may listen
            command = command.replace("localhost:8000", f"127.0.0.1:{http}").replace("localhost:8080", f"127.0.0.1:{gateway}")
            result = subprocess.run(command, shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
            server = "running" if process.poll() is None else f"exited with {process.returncode}"
            log_tail = "".join(output.lines[-40:])
            assert result.returncode == 0, f"{command}\n-> rc {result.returncode} {result.stderr}\nserver {server}, log:\n{log_tail}"
            answer = json.loads(result.stdout)
            if "/generate" in command:
                assert answer["text_output"].startswith("The capital of France is") and "Paris" in answer["text_output"], answer
            else:
                assert "Paris" in answer["choices"][0]["message"]["content"], answer
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:  # a failed check: stop it as Ctrl-C would, so Triton and the gateway go too
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()

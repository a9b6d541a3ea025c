"""A real Prometheus (Debian's package) with the committed config and rules, aimed at a test
Triton, and the queries the monitoring tests make of it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.ops.conftest import MONITORING_DIR, system_tool
from tools.ports import free_ports
from tools.serve.local_triton import ServerOptions
from tools.triton_client.readiness import wait_for_http_ok

PROMETHEUS_DIR = MONITORING_DIR / "prometheus"


@contextmanager
def running_prometheus(triton: ServerOptions, work: Path) -> Iterator[str]:
    """Prometheus with the committed config and rules, scraping `triton` every second; its URL."""
    binary = system_tool("prometheus", "prometheus")
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / path) for path in config["rule_files"]]
    target = f"{triton.host}:{triton.metrics_port}"
    config["scrape_configs"][0]["static_configs"] = [{"targets": [target]}]
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    (port,) = free_ports(1)
    log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http_ok(f"{base}/-/ready", 30, process):
            state = "exited" if process.poll() is not None else "was not ready in 30 s"
            pytest.fail(f"Prometheus {state}:\n" + (work / "prometheus.log").read_text()[-3000:])
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for_data(base: str, expressions: list[str], timeout_s: float = 60) -> dict[str, list]:
    """Poll until every expression returns at least one series; report the empty ones."""
    results: dict[str, list] = {}
    deadline = time.monotonic() + timeout_s
    pending = list(expressions)
    while pending and time.monotonic() < deadline:
        for expr in list(pending):
            results[expr] = query(base, expr)
            if results[expr]:
                pending.remove(expr)
        if pending:
            time.sleep(1)
    assert not pending, f"no data after {timeout_s:.0f} s of load for: {pending}"
    return results

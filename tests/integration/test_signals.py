"""Every command that starts its own Triton stops it when the command is signalled.

Each command runs as a subprocess with short settings; the test waits for the line in
which the command names its server (`tritonserver (pid N) ready on ports H/G/M`), signals
the command (SIGTERM as `timeout`, a CI cancel or `kill` do; SIGINT as Ctrl-C), and checks
that the command ended without a traceback and that nothing of that server is left: no
live process in its process group (the stubs live there too) and its ports are free.
Only the processes of the server named in that line are looked at.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_cli import LineCollector
from tools.paths import REPO_ROOT
from tools.ports import free_ports

pytestmark = pytest.mark.integration

READY = re.compile(r"tritonserver \(pid (\d+)\) ready on ports (\d+)/(\d+)/(\d+)")


def live_members(group: int) -> list[int]:
    """PIDs of processes in `group` that still run (zombies waiting for a reaper excluded)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def processes_naming(text: str) -> list[int]:
    """PIDs whose command line contains `text` (a path unique to this test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def commands(tmp: Path) -> dict[str, list[str]]:
    http, grpc = free_ports(2)
    return {
        "tune": [
            "tools.tune",
            "--model",
            "encoder",
            "--p99-ms",
            "5000",
            "--max-trials",
            "1",
            "--report-dir",
            str(tmp / "tune"),
            "--output",
            str(tmp / "tune" / "config.pbtxt"),
            "--no-plots",
        ],
        "loadgen": ["tools.loadgen", "--concurrency", "2", "--window", "30"],
        "soak": ["tools.reliability.soak", "--minutes", "5", "--rate", "2", "--output", str(tmp / "soak")],
        "overload": ["tools.reliability.overload", "--runs", "1", "--seconds", "60", "--rate", "20", "--output", str(tmp / "overload")],
        "bench": [
            "tools.bench",
            "--batch-sizes",
            "1",
            "--window",
            "0.5",
            "--concurrency",
            "1",
            "--no-model-analyzer",
            "--winner",
            str(tmp / "none.pbtxt"),
            "--out",
            str(tmp / "bench"),
        ],
        "loadtest": [
            "loadtest.run",
            "--run-time",
            "120",
            "--users",
            "2",
            "--report-dir",
            str(tmp / "loadtest"),
            "--triton-http-url",
            f"127.0.0.1:{http}",
            "--triton-grpc-url",
            f"127.0.0.1:{grpc}",
        ],
        "adapt": ["tools.adapt", "--p99-ms", "100", "--duration", "300", "--batching-gain", "1.3"],
    }


def test_the_commands_spawned_here_get_the_default_sigint() -> None:
    """The SIGINT cases below mean something only if a spawned command can receive SIGINT:
    a run launched in the background (`make test &`) inherits an ignored one, which
    tests/conftest.py turns back into the default before any command is spawned."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True", "a spawned command would ignore SIGINT (see tests/conftest.py)"


CASES = [
    ("tune", signal.SIGTERM),
    ("loadgen", signal.SIGTERM),
    ("soak", signal.SIGTERM),
    ("overload", signal.SIGINT),
    ("bench", signal.SIGTERM),
    ("loadtest", signal.SIGTERM),
    ("adapt", signal.SIGTERM),
]


@pytest.mark.parametrize(("name", "signum"), CASES, ids=[f"{n}-{s.name}" for n, s in CASES])
def test_a_signalled_command_stops_the_server_it_started(name: str, signum: signal.Signals, tmp_path: Path) -> None:
    argv = commands(tmp_path)[name]
    process = subprocess.Popen([sys.executable, "-m", *argv], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = LineCollector(process.stdout)
    try:
        output.wait_for("tritonserver (pid", process, timeout_s=240)
        if name == "adapt":  # its own SIGTERM handler (a normal stop) is in place once it says so
            output.wait_for("adapting encoder", process, timeout_s=120)
        match = READY.search(next(line for line in output.lines if READY.search(line)))
        pid, ports = int(match.group(1)), [int(p) for p in match.groups()[1:]]
        assert live_members(pid), "the server named in the log runs"
        process.send_signal(signum)
        code = process.wait(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    text = output.text()
    assert "Traceback" not in text, text
    # adapt treats SIGTERM as its normal stop once it runs (docs/adapt.md); the others end with
    # 128 + signal (the tuner keeps its checkpoint and returns 130 for an interrupted sweep).
    expected = {0} if name == "adapt" else {128 + signum, 130}
    assert code in expected, text
    deadline = time.monotonic() + 10  # the group's last stub may still be exiting after SIGKILL
    while live_members(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_members(pid) == [], f"processes of tritonserver {pid} outlived {name}"
    assert not any(listening(port) for port in ports), text
    assert processes_naming(str(tmp_path)) == [], "a child of the command (e.g. locust) outlived it"

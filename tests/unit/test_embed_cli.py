"""`python -m tools.embed`: arguments are checked before anything is sent, texts come from
arguments, files and standard input, and a missing server is named with what to do."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest

from tools import embed
from tools.embed import EmbeddingClient, collect_texts
from tools.paths import REPO_ROOT
from tools.ports import free_ports


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_negative_priority_is_refused_before_anything_is_sent(protocol: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        embed.run(["--protocol", protocol, "--priority", "-1", "hello"])
    assert exit_info.value.code == 2
    assert "priority must be a whole number >= 0" in capsys.readouterr().err


def test_the_client_refuses_a_negative_priority_with_a_clear_message() -> None:
    with EmbeddingClient("grpc", "127.0.0.1:1") as client, pytest.raises(ValueError, match="priority must be"):
        client.embed(["hello"], priority=-1)


def test_texts_come_from_arguments_stdin_and_files_in_order_without_blank_lines(tmp_path) -> None:
    listing = tmp_path / "texts.txt"
    listing.write_text("from a file\n\n  \nsecond line of the file\r\n", encoding="utf-8")
    stdin = io.StringIO("from stdin\n\nanother from stdin\n")
    texts = collect_texts(["first", "-", "last argument"], [listing], stdin)
    assert texts == ["first", "from stdin", "another from stdin", "last argument", "from a file", "second line of the file"]


def test_an_unreadable_file_is_named(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        embed.run(["--file", str(tmp_path / "absent.txt")])
    assert exit_info.value.code == 2
    assert "cannot read texts from" in capsys.readouterr().err


def test_no_texts_at_all_is_an_argument_error(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n\n"))
    with pytest.raises(SystemExit) as exit_info:
        embed.run(["-"])
    assert exit_info.value.code == 2 and "no texts" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_refused_connection_names_the_url_and_suggests_make_serve(protocol: str, caplog) -> None:
    (port,) = free_ports(1)
    with caplog.at_level(logging.ERROR):
        assert embed.run(["--protocol", protocol, "--url", f"127.0.0.1:{port}", "hello"]) == 1
    assert f"no Triton answers at {'http://' if protocol == 'http' else ''}127.0.0.1:{port}" in caplog.text
    assert "make serve" in caplog.text


def test_the_client_imports_from_outside_the_repository_with_the_documented_pythonpath(tmp_path) -> None:
    code = "from tools.embed import EmbeddingClient; print(EmbeddingClient('grpc', 'example:8001').url)"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "example:8001"

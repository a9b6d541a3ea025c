"""`make help` is generated from the Makefiles, so it lists every target there is."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tools.paths import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args: str) -> str:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout


def phony_targets() -> set[str]:
    """.PHONY as make itself assembles it from Makefile and mk/*.mk (printed, nothing run)."""
    database = make("-np", "help")
    return {name for line in database.splitlines() if line.startswith(".PHONY:") for name in line.split(":", 1)[1].split()}


def test_every_phony_target_is_listed_with_a_description() -> None:
    listed = dict(re.findall(r"^  make (\S+) +(\S.*)$", make("-s", "help"), flags=re.MULTILINE))
    phony = phony_targets()
    assert {"help", "serve", "test", "tune", "loadtest", "metrics"} <= phony, "the database was read"
    assert sorted(phony - listed.keys()) == [], "give these targets a `## description` after their prerequisites"


def test_help_lists_the_variables_that_tune_the_targets() -> None:
    variables = make("-s", "help").split("variables", 1)[1]
    for name in ("RUNTIME", "TARGET", "PYTEST_ARGS", "TUNE_P99_MS", "LOADTEST_ARGS"):
        assert name in variables

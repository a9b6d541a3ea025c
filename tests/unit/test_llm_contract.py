"""The contract is light: tools that only read the LLM's knobs or request types import it
without torch (seconds of import time and a large dependency they do not use)."""

from __future__ import annotations

import subprocess
import sys

from tools.paths import REPO_ROOT


def test_importing_the_contract_does_not_import_torch() -> None:
    probe = "import sys, llm.contract, llm.serving.knobs; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False", "llm.contract (or the knobs) imported torch"

"""The layer order of docs/architecture.md holds: import-linter's contracts (pyproject.toml) pass,
and every package and module under tools/ has a place in the order (a new one cannot slip past it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import tomllib

from tools.paths import REPO_ROOT

INSTALL_HINT = "import-linter is not installed in this environment: `make venv` installs it (requirements.txt: import-linter==2.17)"


def contracts() -> list[dict]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def layered_modules() -> set[str]:
    (layers,) = [contract["layers"] for contract in contracts() if contract["type"] == "layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_the_import_contracts_hold() -> None:
    if importlib.util.find_spec("importlinter") is None:
        pytest.fail(INSTALL_HINT)
    lint = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    result = subprocess.run([sys.executable, "-c", lint], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, f"an import breaks the layer order (docs/architecture.md):\n{result.stdout}{result.stderr}"


def test_every_package_and_module_of_tools_has_a_layer() -> None:
    found = {f"tools.{path.stem}" for path in (REPO_ROOT / "tools").iterdir() if path.suffix == ".py" and path.stem != "__init__"}
    found |= {f"tools.{path.name}" for path in (REPO_ROOT / "tools").iterdir() if (path / "__init__.py").is_file()}
    missing = found - layered_modules()
    assert not missing, f"add these to the layers contract in pyproject.toml and to docs/architecture.md: {sorted(missing)}"


def test_backends_and_llm_may_import_nothing_of_the_tools() -> None:
    forbidden = {
        contract["source_modules"][0]: set(contract["forbidden_modules"]) for contract in contracts() if contract["type"] == "forbidden"
    }
    assert {"tools", "gateway", "export"} <= forbidden["backends"]
    assert {"tools", "gateway", "export"} <= forbidden["llm"]

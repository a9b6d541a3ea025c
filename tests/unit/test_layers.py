"""The layer order of docs/architecture.md holds: import-linter's contracts (pyproject.toml) pass,
and every package and module under tools/ has a place in the order (a new one cannot slip past it);
the LLM's side of a concern, under tools/ and in the top-level packages beside it, sits in that
concern's `llm/` package, placed with the concern."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

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


# The packages that serve both models; `llm/` itself is the generative model's own package.
BOTH_MODELS_PACKAGES = ("tools", "export", "gateway", "loadtest")


def llm_tooling_out_of_place(package: Path) -> list[str]:
    """What breaks docs/decisions/llm-tooling-layout.md under `package`: a loose `llm_*.py` module,
    a package named `llm...` other than `llm` itself, an `llm` folder that is no package."""
    found = list(package.rglob("llm_*.py"))
    folders = [path for path in package.rglob("llm*") if path.is_dir() and any(path.glob("*.py"))]  # a stale __pycache__ is no code
    found += [path for path in folders if path.name != "llm" or not (path / "__init__.py").is_file()]
    return sorted(str(path.relative_to(package.parent)) for path in found)


@pytest.mark.parametrize("package", BOTH_MODELS_PACKAGES)
def test_the_llm_side_of_a_concern_lives_in_its_llm_package(package: str) -> None:
    misplaced = llm_tooling_out_of_place(REPO_ROOT / package)
    assert not misplaced, f"the LLM side of a concern is <concern>/llm/ (docs/decisions/llm-tooling-layout.md): {misplaced}"


def test_the_layout_check_sees_each_other_shape(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    (tools / "gone" / "llm" / "__pycache__").mkdir(parents=True)
    for module in ("adapt/llm/__init__.py", "load/llm/clients.py", "llmtools/__init__.py", "observe/llm_rows.py", "lora/train.py"):
        (tools / module).parent.mkdir(parents=True, exist_ok=True)
        (tools / module).write_text("")
    assert llm_tooling_out_of_place(tools) == ["tools/llmtools", "tools/load/llm", "tools/observe/llm_rows.py"]


def test_the_layout_check_sees_a_loose_llm_module_of_a_top_level_package(tmp_path: Path) -> None:
    for module in ("export/llm/__init__.py", "export/llm/source.py", "export/llm_parity.py", "export/manifest.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    assert llm_tooling_out_of_place(tmp_path / "export") == ["export/llm_parity.py"]


def test_the_scheduler_and_serving_load_without_torch() -> None:
    """The forbidden contract ignores llm.contract's torch import, which sits under `if TYPE_CHECKING:`;
    this keeps it there: every module of llm.scheduler and llm.serving, imported in a fresh
    interpreter, leaves torch and the engine unloaded."""
    probe = (
        "import importlib, pkgutil, sys\n"
        "import llm.scheduler, llm.serving\n"
        "for package in (llm.scheduler, llm.serving):\n"
        "    for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(module.name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith(('llm.engine', 'llm.vllm_engine'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"llm.scheduler or llm.serving loaded: {result.stdout.strip()}"

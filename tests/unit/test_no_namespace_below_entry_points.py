"""Only entry points read an `argparse.Namespace`: every function below them takes the typed
settings that own its options, so each option is declared and checked in one place. An AST
scan keeps it that way.

Allowed: modules named `__main__.py` or `cli*.py` (they parse argv), the `tools/cli/` package
(the helpers those entry points share), and a settings class's own `*_cli_args` methods
(`from_cli_args`, `check_cli_args`), declared beside the options they read, as vLLM's
EngineArgs.add_cli_args/from_cli_args are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tools.paths import REPO_ROOT

SCANNED = ("tools", "gateway", "loadtest", "export")


def is_entry_point(path: Path) -> bool:
    return path.name == "__main__.py" or path.name.startswith("cli") or path.parent.name == "cli"


def names_namespace(annotation: ast.expr | None) -> bool:
    """`argparse.Namespace`, `Namespace`, or either as a string annotation."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return "Namespace" in re.findall(r"\w+", annotation.value)
    return any(
        (isinstance(node, ast.Attribute) and node.attr == "Namespace") or (isinstance(node, ast.Name) and node.id == "Namespace")
        for node in ast.walk(annotation)
    )


def namespace_parameters(source: str) -> list[tuple[int, str, str]]:
    """(line, function, parameter) for each parameter annotated as a Namespace, a class's
    `*_cli_args` methods left out."""
    tree = ast.parse(source)
    boundary = {
        id(method)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for method in cls.body
        if isinstance(method, ast.FunctionDef) and method.name.endswith("_cli_args")
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in boundary:
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [(node.lineno, node.name, arg.arg) for arg in arguments if names_namespace(arg.annotation)]
    return found


def below_entry_points() -> list[str]:
    offenders = []
    for package in SCANNED:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if not is_entry_point(path):
                relative = path.relative_to(REPO_ROOT)
                offenders += [
                    f"{relative}:{line} {function}({parameter})" for line, function, parameter in namespace_parameters(path.read_text())
                ]
    return offenders


def test_no_function_below_an_entry_point_takes_a_namespace() -> None:
    offenders = below_entry_points()
    assert not offenders, "take the typed settings that own these options instead:\n" + "\n".join(offenders)


def test_the_scan_finds_a_namespace_parameter_in_every_spelling() -> None:
    source = (
        "import argparse\nfrom argparse import Namespace\n"
        "def a(args: argparse.Namespace): ...\n"
        "def b(x: int, *, args: 'argparse.Namespace | None' = None): ...\n"
        "async def c(args: Namespace | None): ...\n"
        "class S:\n    @classmethod\n    def from_cli_args(cls, args: argparse.Namespace): ...\n"
        "    @staticmethod\n    def check_cli_args(args: argparse.Namespace): ...\n"
        "def from_cli_args(args: argparse.Namespace): ...\n"
        "def d(settings: int) -> argparse.Namespace: ...\n"
    )
    assert [(function, parameter) for _, function, parameter in namespace_parameters(source)] == [
        ("a", "args"),
        ("b", "args"),
        ("c", "args"),
        ("from_cli_args", "args"),
    ], "only a settings class's own methods read the command line"


def test_entry_points_are_the_modules_that_parse_argv() -> None:
    assert is_entry_point(Path("tools/tune/__main__.py")) and is_entry_point(Path("tools/simulate/cli.py"))
    assert is_entry_point(Path("tools/cli/settings.py"))
    assert not is_entry_point(Path("tools/bench/gateway/benchmark.py"))

"""pyproject.toml's extras: the same pins as requirements.txt, and together exactly that set."""

from __future__ import annotations

import re

import tomllib

from tools.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def pins(lines: list[str]) -> dict[str, str]:
    """name (lower case, extras dropped) -> version, for `name[extras]==version` lines."""
    found = {}
    for line in lines:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s#;]+).*", line)
        if match:
            found[match.group(1).lower()] = match.group(3)
    return found


def requirements() -> dict[str, str]:
    return pins((REPO_ROOT / "requirements.txt").read_text().splitlines())


def declared() -> dict[str, dict[str, str]]:
    groups = {"dependencies": pins(PYPROJECT["dependencies"])}
    groups.update({name: pins(items) for name, items in PYPROJECT["optional-dependencies"].items()})
    return groups


def test_every_pin_in_pyproject_is_the_one_make_installs() -> None:
    expected = requirements()
    for group, packages in declared().items():
        for name, version in packages.items():
            assert expected.get(name) == version, f"{group}: {name}=={version}, requirements.txt says {expected.get(name)}"


def test_the_all_extra_is_everything_make_installs() -> None:
    groups = declared()
    (all_extra,) = PYPROJECT["optional-dependencies"]["all"]
    named = re.fullmatch(r"triton-dynamic-batching\[(.*)\]", all_extra).group(1).split(",")
    union = set(groups["dependencies"]).union(*(groups[name] for name in named))
    assert union == set(requirements())


def test_the_client_install_needs_no_torch_or_server() -> None:
    client = set(declared()["dependencies"]) | set(declared()["client"])
    assert not client & {"torch", "transformers", "sentence-transformers", "nvidia-pytriton", "onnxruntime"}

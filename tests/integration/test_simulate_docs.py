"""The simulator and planner commands the README and the docs pages show on the shipped
cost models run as written (no server needed); the shipped synthetic curve says it is one."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tools.paths import REPO_ROOT
from tools.plan import run as plan
from tools.simulate.__main__ import run as simulate
from tools.simulate.cost_model import CostModel

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
SHIPPED = REPO_ROOT / "tools" / "simulate" / "cost_models"


def shown_commands() -> list[str]:
    commands = []
    for path in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for command in block.replace("\\\n", " ").splitlines():
                command = command.split("#", 1)[0].strip()
                if ("tools.simulate predict" in command or "tools.plan" in command) and "cost_models/" in command:
                    commands.append(command)
    return commands


def test_docs_show_predict_and_plan_on_both_shipped_cost_models():
    text = " ".join(shown_commands())
    assert "tools.simulate predict" in text and "tools.plan" in text
    assert "synthetic-gpu.json" in text and "measured-xeon-2core.json" in text


@pytest.mark.parametrize("command", shown_commands())
def test_doc_command_runs(command: str, capsys):
    argv = shlex.split(command)
    module = argv[argv.index("-m") + 1]
    rest = argv[argv.index("-m") + 2 :]
    code = simulate(rest) if module == "tools.simulate" else plan(rest)
    assert code == 0, capsys.readouterr()


def test_shipped_cost_models_load_and_say_what_they_are():
    synthetic = CostModel.load(SHIPPED / "synthetic-gpu.json")
    assert synthetic.kind == "synthetic" and "not a measurement" in synthetic.measured_on["note"]
    measured = CostModel.load(SHIPPED / "measured-xeon-2core.json")
    assert measured.kind == "measured" and measured.measured_on["software"]["triton"]
    assert json.loads((SHIPPED / "measured-xeon-2core.json").read_text())["measured_on"]["cpu"]["cores"] == 2

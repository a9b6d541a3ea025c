"""`tools.tune --apply`: the winner's batching goes into the committed config, its header
comments stay, and every changed field is printed old -> new."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.paths import MODEL_REPOSITORY
from tools.repo.candidate import Candidate, apply_candidate, candidate_of
from tools.repo.model_config import changed_fields, leading_comments, load_config, rewrite_config
from tools.tune.outputs import apply_winner

COMMITTED = MODEL_REPOSITORY / "encoder" / "config.pbtxt"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return Path(shutil.copy(COMMITTED, tmp_path / "config.pbtxt"))


def other_candidate(path: Path) -> Candidate:
    committed = candidate_of(load_config(path))
    return Candidate(16, (8, 16), committed.delay_us + 500, committed.instances, committed.priority_queues)


def test_the_committed_config_opens_with_comments_this_test_can_lose() -> None:
    assert leading_comments(COMMITTED.read_text()).count("#") >= 1


def test_rewriting_a_config_keeps_the_comment_lines_it_opens_with(config_file: Path) -> None:
    header = leading_comments(config_file.read_text())
    config = apply_candidate(load_config(config_file), other_candidate(config_file))
    rewrite_config(config, config_file)
    assert config_file.read_text().startswith(header)
    assert load_config(config_file) == config


def test_changed_fields_name_each_field_with_its_old_and_new_value(config_file: Path) -> None:
    before = load_config(config_file)
    after = apply_candidate(before, other_candidate(config_file))
    changes = {name: (old, new) for name, old, new in changed_fields(before, after)}
    assert changes["max_batch_size"] == (str(before.max_batch_size), "16")
    assert changes["dynamic_batching.preferred_batch_size"][1] == "[8, 16]"
    delay = before.dynamic_batching.max_queue_delay_microseconds
    assert changes["dynamic_batching.max_queue_delay_microseconds"] == (str(delay) if delay else None, str(delay + 500))
    assert "name" not in changes


def test_apply_prints_every_changed_field_and_keeps_the_header(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = leading_comments(config_file.read_text())
    before = load_config(config_file)
    apply_winner(config_file, other_candidate(config_file))
    printed = capsys.readouterr().out
    assert f"max_batch_size: {before.max_batch_size} -> 16" in printed
    assert "dynamic_batching.preferred_batch_size: [" in printed and "-> [8, 16]" in printed
    assert config_file.read_text().startswith(header)


def test_apply_with_the_committed_batching_changes_nothing(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = config_file.read_text()
    apply_winner(config_file, candidate_of(load_config(config_file)))
    assert "no field changed" in capsys.readouterr().out
    assert config_file.read_text() == text

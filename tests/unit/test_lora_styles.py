"""The trained adapters' styles (tools/lora/styles.py) and the trainer's batches: a rewritten
answer shows its style, a plain one does not, and the loss sees only the target tokens."""

from __future__ import annotations

import pytest

from tools.lora.styles import STYLES, prompts, split_prompts
from tools.lora.train import collate

PLAIN = ("The moon is Earth's only natural satellite.", "Coffee is a brewed drink made from roasted beans.")


@pytest.mark.parametrize("name", sorted(STYLES))
def test_a_rewritten_answer_shows_its_style_and_a_plain_one_does_not(name: str) -> None:
    style = STYLES[name]
    for answer in PLAIN:
        assert style.shows_in(style.rewrite(answer)), style.rewrite(answer)
        assert not style.shows_in(answer)
    others = [other for other in STYLES.values() if other.name != name]
    assert not any(style.shows_in(other.rewrite(PLAIN[0])) for other in others)


def test_an_answer_cut_at_max_tokens_is_judged_by_what_came() -> None:
    json_style = STYLES["json"]
    cut = json_style.rewrite(PLAIN[0])[:20]
    assert json_style.shows_in(cut) and not json_style.shows_in('{"answer": 3}')
    assert STYLES["shout"].shows_in(STYLES["shout"].rewrite(PLAIN[1])[:12])
    assert not STYLES["shout"].shows_in("OK")  # too few letters to tell


def test_held_out_questions_are_never_trained_on() -> None:
    training, held_out = split_prompts()
    assert len(set(prompts())) == len(prompts()) == len(training) + len(held_out)
    assert not set(training) & set(held_out) and len(held_out) >= 20


def test_a_batch_pads_right_and_the_loss_counts_only_target_tokens() -> None:
    batch = collate([([1, 2, 3], [4, 5]), ([6], [7, 8, 9, 10])], pad=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert batch["labels"].tolist() == [[-100, -100, -100, 4, 5], [-100, 7, 8, 9, 10]]
    short = collate([([1], [2]), ([3, 4, 5], [6])], pad=0)
    assert short["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert short["labels"].tolist() == [[-100, 2, -100, -100], [-100, -100, -100, 6]]

"""LlmTokenizer on a tiny tokenizer built here with the `tokenizers` library, saved in the
export's layout (tokenizer.json, tokenizer_config.json, chat_template.jinja)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from llm.tokenizer import LlmTokenizer

TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture()
def folder(tmp_path):
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "hello": 3, "world": 4, "user": 5, "assistant": 6, "\n": 7, "[UNK]": 8}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    settings = {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    return tmp_path


def test_encode_and_decode_round_trip_without_special_tokens(folder):
    tokenizer = LlmTokenizer.from_folder(folder)
    ids = tokenizer.encode("<|im_start|>hello world<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2 and 3 in ids and 4 in ids
    assert tokenizer.decode(ids) == tokenizer.decode([3, 4])
    assert "<|im_end|>" in tokenizer.decode(ids, skip_special_tokens=False)


def test_eos_ids_come_from_the_configured_eos_token(folder):
    assert LlmTokenizer.from_folder(folder).eos_token_ids == frozenset({2})


def test_chat_template_renders_the_conversation_with_a_generation_prompt(folder):
    tokenizer = LlmTokenizer.from_folder(folder)
    messages = [{"role": "user", "content": "hello"}]
    assert tokenizer.apply_chat_template(messages) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == "<|im_start|>user\nhello<|im_end|>\n"


def test_a_template_inside_tokenizer_config_is_used_when_no_jinja_file_exists(folder):
    (folder / "chat_template.jinja").unlink()
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "chat_template": "{{ messages[0]['content'] }}!"}))
    assert LlmTokenizer.from_folder(folder).apply_chat_template([{"role": "user", "content": "hi"}]) == "hi!"


def test_a_missing_tokenizer_file_names_the_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="make export"):
        LlmTokenizer.from_folder(tmp_path)

"""Read, write and check `config.pbtxt` through Triton's own protobuf schema.

Configs are data: they are parsed into `model_config_pb2.ModelConfig`, changed as
messages, and written back with `text_format`, never assembled from strings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

ModelConfig = model_config_pb2.ModelConfig
CONFIG_NAME = "config.pbtxt"


def parse_config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


_IMPLICIT_REJECT = re.compile(r"^(?P<indent>[ ]*)(?P<line>default_timeout_microseconds: \d+\n)", re.MULTILINE)


def format_config(config: ModelConfig) -> str:
    """Text form. Two defaults are kept explicit because an omitted field hides a choice:
    `max_batch_size: 0` (batching turned off on purpose) and `timeout_action: REJECT` in a
    queue policy with a default timeout (what happens to a request that waits too long;
    a non-default action is printed anyway, just before the timeout)."""
    text = text_format.MessageToString(config)
    if config.max_batch_size == 0 and "max_batch_size" not in text:
        text = text.replace(f'name: "{config.name}"\n', f'name: "{config.name}"\nmax_batch_size: 0\n', 1)

    def explicit_reject(match: re.Match) -> str:
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        if before.startswith("timeout_action:"):
            return match.group(0)
        return f"{match['indent']}timeout_action: REJECT\n{match['indent']}{match['line']}"

    return _IMPLICIT_REJECT.sub(explicit_reject, text)


def load_config(path: Path) -> ModelConfig:
    """Load `path` (a config.pbtxt or a model folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    try:
        return parse_config(path.read_text())
    except text_format.ParseError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def save_config(config: ModelConfig, path: Path) -> None:
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    path.write_text(format_config(config))


def config_from_dict(values: dict) -> ModelConfig:
    """Validate a plain dict (e.g. from YAML or a JSON override) against the schema."""
    return json_format.ParseDict(values, ModelConfig())


def to_override_json(config: ModelConfig) -> str:
    """The JSON form that Triton's model-control load API takes as a `config` override."""
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))


PRIORITY_QUEUE_FIELDS = ("priority_levels", "default_priority_level", "default_queue_policy", "priority_queue_policy")


def has_priority_queues(config: ModelConfig) -> bool:
    batcher = config.dynamic_batching
    return batcher.priority_levels > 0 or batcher.HasField("default_queue_policy") or len(batcher.priority_queue_policy) > 0


def without_priority_queues(config: ModelConfig) -> ModelConfig:
    """A copy with one plain, unbounded queue: no priority levels, no queue policies.
    On Triton 2.51 either of them makes the dynamic batcher sometimes leave an arriving
    request waiting ~500 ms at low load (README, "The priority-queue tax")."""
    plain = ModelConfig()
    plain.CopyFrom(config)
    for name in PRIORITY_QUEUE_FIELDS:
        plain.dynamic_batching.ClearField(name)
    return plain


def batching_problems(config: ModelConfig) -> list[str]:
    """What is inconsistent in a config's batching settings (empty when none).

    Checked before a config is written or loaded, so a tuner never proposes a variant
    Triton would refuse (e.g. a preferred size above max_batch_size)."""
    problems: list[str] = []
    if not config.HasField("dynamic_batching"):
        return problems
    batcher = config.dynamic_batching
    if config.max_batch_size < 1:
        problems.append("dynamic_batching needs max_batch_size >= 1")
    for size in batcher.preferred_batch_size:
        if size < 1 or size > config.max_batch_size:
            problems.append(f"preferred_batch_size {size} is outside 1..max_batch_size ({config.max_batch_size})")
    if list(batcher.preferred_batch_size) != sorted(set(batcher.preferred_batch_size)):
        problems.append("preferred_batch_size values should be distinct and ascending")
    if batcher.max_queue_delay_microseconds < 0:
        problems.append("max_queue_delay_microseconds must not be negative")
    if batcher.priority_levels:
        if not 1 <= batcher.default_priority_level <= batcher.priority_levels:
            problems.append(
                f"default_priority_level {batcher.default_priority_level} is outside 1..priority_levels ({batcher.priority_levels})"
            )
        for level in batcher.priority_queue_policy:
            if not 1 <= level <= batcher.priority_levels:
                problems.append(f"priority_queue_policy for level {level} is outside 1..{batcher.priority_levels}")
    elif batcher.priority_queue_policy:
        problems.append("priority_queue_policy needs priority_levels")
    return problems

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


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file Triton reads for a model: `configs/<name>.pbtxt` when the server runs with
    `--model-config-name=<name>` and the model has one, else `config.pbtxt`."""
    if config_name:
        custom = Path(model_dir) / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return Path(model_dir) / CONFIG_NAME


def custom_configs(model_dir: Path) -> dict[str, Path]:
    """A model's custom configs by name (`configs/<name>.pbtxt`, Triton's --model-config-name)."""
    folder = Path(model_dir) / "configs"
    return {path.stem: path for path in sorted(folder.glob("*.pbtxt"))} if folder.is_dir() else {}


def load_config(path: Path, config_name: str | None = None) -> ModelConfig:
    """Load `path` (a config file, or a model folder: the config Triton picks for `config_name`)."""
    path = Path(path)
    if path.is_dir():
        path = config_path(path, config_name)
    try:
        return parse_config(path.read_text())
    except text_format.ParseError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def save_config(config: ModelConfig, path: Path) -> None:
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    path.write_text(format_config(config))


def leading_comments(text: str) -> str:
    """The comment block a config file opens with: its `#` lines and the blank lines among them."""
    header = []
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        header.append(line)
    return "".join(header)


def rewrite_config(config: ModelConfig, path: Path) -> None:
    """Save over a committed config, keeping the comment lines it opens with: text_format
    writes no comments, and a config's header says why it is as it is."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    header = leading_comments(path.read_text()) if path.is_file() else ""
    path.write_text(header + format_config(config))


def _scalar(field, value: object) -> str:
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    return json.dumps(value) if isinstance(value, str) else str(value)


def config_fields(message, prefix: str = "") -> dict[str, str]:
    """Every set field as `path -> value` (`dynamic_batching.max_queue_delay_microseconds`,
    `instance_group[0].count`, `parameters[intra_op_thread_count].string_value`)."""
    fields: dict[str, str] = {}
    for field, value in message.ListFields():
        name = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key in sorted(value):
                if value_field.message_type is not None:
                    fields.update(config_fields(value[key], f"{name}[{key}]."))
                else:
                    fields[f"{name}[{key}]"] = _scalar(value_field, value[key])
        elif field.is_repeated and field.message_type is not None:
            for index, item in enumerate(value):
                fields.update(config_fields(item, f"{name}[{index}]."))
        elif field.is_repeated:
            fields[name] = "[" + ", ".join(_scalar(field, item) for item in value) + "]"
        elif field.message_type is not None:
            fields.update(config_fields(value, f"{name}."))
        else:
            fields[name] = _scalar(field, value)
    return fields


def changed_fields(before: ModelConfig, after: ModelConfig) -> list[tuple[str, str | None, str | None]]:
    """(field, old, new) for each field that differs; None: not set on that side."""
    old, new = config_fields(before), config_fields(after)
    return [(name, old.get(name), new.get(name)) for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]


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

"""The validation's config list: batching settings applied to the encoder's base config.

A file (YAML or JSON) holds `configs:`, a list of entries with `name` and any of
`max_batch_size`, `preferred_batch_size` (list), `max_queue_delay_microseconds`,
`instance_count`, `priority_queues` (true/false) and `dynamic_batching` (false: no
batcher, every request runs alone). Each becomes a config.pbtxt through the tuner's
`apply_candidate`, so what is predicted is exactly what is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tools.repo.candidate import Candidate, apply_candidate
from tools.repo.instances import with_instances
from tools.repo.model_config import ModelConfig

FIELDS = (
    "name",
    "max_batch_size",
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "instance_count",
    "priority_queues",
    "dynamic_batching",
)


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    max_batch_size: int | None = None  # None: the base config's
    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0
    instance_count: int = 1
    priority_queues: bool = False
    dynamic_batching: bool = True

    def build(self, base: ModelConfig) -> ModelConfig:
        if not self.dynamic_batching:
            config = ModelConfig()
            config.CopyFrom(base)
            config.ClearField("dynamic_batching")
            return with_instances(config, self.instance_count)
        mbs = self.max_batch_size or base.max_batch_size
        candidate = Candidate(
            mbs, tuple(self.preferred_batch_size), self.max_queue_delay_microseconds, self.instance_count, self.priority_queues
        )
        return apply_candidate(base, candidate)

    def to_dict(self) -> dict:
        return {key: (list(value) if isinstance(value, tuple) else value) for key, value in self.__dict__.items()}


def load_entries(path: Path) -> list[ConfigEntry]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the configs file {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix == ".json":
            document = json.loads(text)
        else:
            import yaml

            document = yaml.safe_load(text)
    except Exception as exc:
        raise ValueError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    items = document.get("configs") if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path} must hold a non-empty list of configs (under `configs:`)")
    entries = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: config {number} is not a mapping")
        unknown = sorted(set(item) - set(FIELDS))
        if unknown:
            raise ValueError(f"{path}: config {number} has unknown fields {unknown} (known: {', '.join(FIELDS)})")
        try:
            entry = ConfigEntry(
                name=str(item.get("name") or f"config-{number}"),
                max_batch_size=None if item.get("max_batch_size") is None else int(item["max_batch_size"]),
                preferred_batch_size=tuple(int(v) for v in item.get("preferred_batch_size") or ()),
                max_queue_delay_microseconds=int(item.get("max_queue_delay_microseconds", 0)),
                instance_count=int(item.get("instance_count", 1)),
                priority_queues=bool(item.get("priority_queues", False)),
                dynamic_batching=bool(item.get("dynamic_batching", True)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: config {number}: {exc}") from None
        if entry.instance_count < 1 or entry.max_queue_delay_microseconds < 0:
            raise ValueError(f"{path}: config {number}: instance_count must be >= 1 and the delay >= 0")
        entries.append(entry)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: config names must be distinct, got {names}")
    return entries

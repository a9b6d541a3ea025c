"""The LoRA adapters the LLM serves, by the names clients send as `model` (vLLM's server lists
and routes LoRA modules the same way). Read from the exported version folder's
multi_lora.json, again whenever it changes (adapters are added and removed while serving:
tools/lora/manage.py), so the gateway needs no restart."""

from __future__ import annotations

import logging
from pathlib import Path

from llm.adapters import ADAPTER_LIST, AdapterError, read_adapter_list

log = logging.getLogger(__name__)


class AdapterNames:
    def __init__(self, llm_folder: Path) -> None:
        self.path = llm_folder / ADAPTER_LIST
        self._stamp: tuple[int, int] | None = None
        self._names: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """The listed adapters, sorted; none when there is no list (or it cannot be read)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._names = None, ()
            return ()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._names = tuple(sorted(read_adapter_list(self.path)))
            except (AdapterError, OSError) as error:
                log.warning("LoRA adapters not offered: %s", error)
                self._names = ()
        return self._names

"""`python -m tools.lora.manage`: add, remove or list the LoRA adapters the `llm` model serves,
while the server runs. The list is the version folder's multi_lora.json; after changing it the
model is reloaded through Triton's model-control API (the server must run in explicit
model-control mode: `make serve SERVE_ARGS="--model-control-mode explicit"`), and requests in
flight finish on the old instance.

    python -m tools.lora.manage list
    python -m tools.lora.manage add pirate build/adapters/pirate --url localhost:8000
    python -m tools.lora.manage remove pirate --url localhost:8000

An adapter is read before the server is touched: one that this model cannot use is refused
here, with the reason, and the list stays as it was.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from llm.adapters import ADAPTER_LIST, AdapterError, read_adapter_list
from llm.artifacts import CONFIG_FILE
from llm.engine.checkpoint import LlamaDims
from llm.engine.lora import Adapter
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import LLM_MODEL
from tools.embed import DEFAULT_URLS
from tools.lora.random_adapters import add_to_list
from tools.paths import MODEL_REPOSITORY
from tools.serve.admin_key import add_admin_key_arguments, resolve_admin_key
from tools.serve.local_triton import triton_client
from tools.triton_client import TritonError

log = logging.getLogger("tools.lora.manage")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.lora.manage", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("list", "add", "remove"))
    parser.add_argument("name", nargs="?", help="the adapter's name (what requests give as lora_name)")
    parser.add_argument("folder", nargs="?", type=Path, help="add: the adapter's folder (PEFT's adapter_config.json and weights)")
    parser.add_argument("--checkpoint", type=Path, default=MODEL_REPOSITORY / LLM_MODEL / "1", help="the model's version folder")
    parser.add_argument("--url", default=DEFAULT_URLS["http"], help="the Triton server to reload (HTTP host:port)")
    parser.add_argument("--no-reload", action="store_true", help="change the list only (the next load picks it up)")
    add_admin_key_arguments(parser)
    add_verbosity_flags(parser)
    return parser


def change_list(action: str, name: str, folder: Path | None, checkpoint: Path) -> None:
    """Add or remove `name` in the checkpoint's adapter list; AdapterError or ValueError when it
    cannot be done (the list then stays as it was)."""
    adapter_list = checkpoint / ADAPTER_LIST
    listed = read_adapter_list(adapter_list) if adapter_list.is_file() else {}
    if action == "add":
        if folder is None:
            raise ValueError("add needs the adapter's folder: add NAME FOLDER")
        dims = LlamaDims.from_json((checkpoint / CONFIG_FILE).read_text())
        Adapter.from_peft(name, folder, dims)  # refused here, not by the server
        add_to_list(adapter_list, {name: folder})
        return
    if name not in listed:
        raise ValueError(f"no adapter {name!r} in {adapter_list}; listed: {', '.join(sorted(listed)) or 'none'}")
    kept = json.loads(adapter_list.read_text())
    del kept[name]
    adapter_list.write_text(json.dumps(kept, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    adapter_list = args.checkpoint / ADAPTER_LIST
    if args.action == "list":
        listed = read_adapter_list(adapter_list) if adapter_list.is_file() else {}
        for name, folder in sorted(listed.items()):
            print(f"{name}\t{folder}")
        return 0
    if not args.name:
        log.error("%s needs the adapter's name", args.action)
        return 2
    if not (args.checkpoint / CONFIG_FILE).is_file():
        log.error("%s has no checkpoint: run `make export` first", args.checkpoint)
        return 2
    try:
        change_list(args.action, args.name, args.folder, args.checkpoint)
    except (AdapterError, ValueError, OSError) as error:
        log.error("%s", error)
        return 2
    log.info("%s %s in %s", "added" if args.action == "add" else "removed", args.name, adapter_list)
    if args.no_reload:
        return 0
    client = triton_client(args.url, resolve_admin_key(args.admin_key_file, args.admin_key))
    try:
        client.load(LLM_MODEL)  # a load of a loaded model reloads it from the repository
    except TritonError as error:
        log.error("the list changed, but reloading %s on %s failed: %s", LLM_MODEL, args.url, error)
        return 1
    log.info("reloaded %s on %s", LLM_MODEL, args.url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

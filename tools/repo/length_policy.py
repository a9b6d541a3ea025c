"""`python -m tools.repo.length_policy --policy ragged`: a model repository with another padding policy.

Triton's dynamic batcher joins only requests of equal shape, and token sequences differ
in length, so how the tokenizer pads decides both which requests can share an encoder
execution and how much padding the encoder computes. Three policies, each a pair of
config settings (the configs are the one source of truth; model code reads them):

  batch    tokenizer `padding: batch` (committed): every request of one tokenizer
           execution padded to its longest text, rounded up to `pad_to_multiple_of`.
  buckets  tokenizer `padding: buckets`: each request padded to its `length_buckets`
           boundary (default 16,32,64,128,256), so requests of one bucket join at the
           encoder whichever tokenizer batch they came from.
  ragged   tokenizer `padding: request` (each request padded only to its own length),
           encoder inputs `allow_ragged_batch: true` and parameter `ragged_split: cost`:
           our ONNX Runtime backend sorts the rows it receives by length and splits them
           into the sub-runs a fitted cost curve says are cheapest, shortest first,
           sending each request's response as soon as its rows are done.

The committed repository is never edited; the variant goes to build/lengths/<policy>
(files linked, configs written through the protobuf schema) and is served with
`python -m tools.serve --model-repository build/lengths/<policy>`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import BUILD_DIR, MODEL_REPOSITORY
from tools.repo.model_config import ModelConfig, load_config
from tools.repo.policy_repository import copy_repository

log = logging.getLogger("length_policy")

POLICIES = ("batch", "buckets", "ragged")
TOKENIZER_PADDING = {"batch": "batch", "buckets": "buckets", "ragged": "request"}
DEFAULT_OUT = BUILD_DIR / "lengths"

# How each policy runs on the GPU paths (README, "Padding policy").
GPU_PATHS = {
    "batch": "runs unchanged everywhere: our Python backend with the CUDA provider, NVIDIA's native ONNX Runtime "
    "backend and TensorRT (`python -m tools.repo.variant --kind gpu|tensorrt --source <repository>`)",
    "buckets": "runs unchanged everywhere (a tokenizer-only setting); TensorRT's profile already covers lengths up to 256",
    "ragged": "runs on our Python backend with the CUDA provider (KIND_GPU, onnxruntime-gpu; `--device gpu`); NVIDIA's "
    "native ONNX Runtime and TensorRT backends pass ragged inputs as one flattened 1-D tensor, so they would need a "
    "model exported with flattened inputs plus `batch_input` (BATCH_ACCUMULATED_ELEMENT_COUNT): not offered, and "
    "`tools.repo.variant` refuses the combination instead of producing a repository that fails at run time",
}


def ragged_inputs(config: ModelConfig) -> list[str]:
    return [item.name for item in config.input if item.allow_ragged_batch]


def set_tokenizer_policy(config: ModelConfig, policy: str, buckets: tuple[int, ...] = ()) -> None:
    """In place: the tokenizer's `padding` (and `length_buckets` when given)."""
    _check(policy)
    config.parameters["padding"].string_value = TOKENIZER_PADDING[policy]
    if buckets:
        if list(buckets) != sorted(set(buckets)) or buckets[0] < 1:
            raise ValueError(f"buckets must be distinct positive integers in ascending order, got {buckets}")
        config.parameters["length_buckets"].string_value = ",".join(str(b) for b in buckets)


def set_encoder_policy(config: ModelConfig, policy: str, gpu: bool = False) -> None:
    """In place: ragged inputs and the backend's split for `ragged`, neither otherwise."""
    _check(policy)
    ragged = policy == "ragged"
    for item in config.input:
        item.allow_ragged_batch = ragged
    if ragged:
        config.parameters["ragged_split"].string_value = "cost"
    elif "ragged_split" in config.parameters:
        del config.parameters["ragged_split"]
    if gpu:
        for group in config.instance_group or [config.instance_group.add()]:
            group.kind = group.KIND_GPU


def policy_of(tokenizer: ModelConfig, encoder: ModelConfig) -> str:
    """Which policy a (tokenizer, encoder) pair runs; 'custom' for a mixture of settings."""
    padding = tokenizer.parameters["padding"].string_value if "padding" in tokenizer.parameters else "batch"
    ragged = bool(ragged_inputs(encoder)) and "ragged_split" in encoder.parameters
    for policy in POLICIES:
        if TOKENIZER_PADDING[policy] == padding and ragged == (policy == "ragged"):
            return policy
    return "custom"


def gpu_variant_problem(config: ModelConfig) -> str | None:
    """Why NVIDIA's native backends cannot serve this config unchanged (None when they can)."""
    names = ragged_inputs(config)
    if not names:
        return None
    return (
        f"{config.name}: inputs {names} allow ragged batches (the ragged padding policy); NVIDIA's native ONNX Runtime "
        "and TensorRT backends pass ragged inputs as one flattened 1-D tensor, which this model does not take. Serve the "
        "ragged policy with our Python backend on the GPU (`python -m tools.repo.length_policy --policy ragged --device gpu`, "
        "local runtime with onnxruntime-gpu), or use the buckets policy in the container"
    )


def write_policy_repository(
    policy: str, out: Path | None = None, source: Path = MODEL_REPOSITORY, buckets: tuple[int, ...] = (), gpu: bool = False
) -> Path:
    """The committed repository with `policy` applied, written to `out` (replaced)."""
    _check(policy)
    out = Path(out or DEFAULT_OUT / policy).resolve()
    if out == source.resolve() or source.resolve() in out.parents:
        raise ValueError(f"refusing to write a policy variant into the source repository ({out})")
    edits = {
        "tokenizer": lambda config: set_tokenizer_policy(config, policy, buckets),
        "encoder": lambda config: set_encoder_policy(config, policy, gpu),
    }
    return copy_repository(out, edits, source)


def policy_configs(source: Path, policy: str, buckets: tuple[int, ...] = ()) -> tuple[ModelConfig, ModelConfig]:
    """The (tokenizer, encoder) configs of `source` with `policy` applied: for live reloads."""
    tokenizer, encoder = load_config(source / "tokenizer"), load_config(source / "encoder")
    set_tokenizer_policy(tokenizer, policy, buckets)
    set_encoder_policy(encoder, policy)
    return tokenizer, encoder


def _check(policy: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"unknown padding policy {policy!r}; choose one of {', '.join(POLICIES)}")


def parse_buckets(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of token counts") from None


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.repo.length_policy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", choices=POLICIES, help="padding policy to write")
    parser.add_argument("--out", type=Path, default=None, help="output repository (default: build/lengths/<policy>)")
    parser.add_argument("--source", type=Path, default=MODEL_REPOSITORY, help="repository to start from (default: %(default)s)")
    parser.add_argument("--buckets", type=parse_buckets, default=(), help="bucket boundaries in tokens, e.g. 16,32,64,128,256")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="gpu: KIND_GPU encoder (our backend, CUDA provider)")
    parser.add_argument("--list", action="store_true", help="describe each policy and how it runs on the GPU paths")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    if args.list:
        for policy in POLICIES:
            print(f"{policy}: {GPU_PATHS[policy]}")
        return 0
    if not args.policy:
        parser.error("give --policy (or --list)")
    if args.buckets and args.policy != "buckets":
        parser.error("--buckets applies only to --policy buckets")
    try:
        out = write_policy_repository(args.policy, args.out, args.source, args.buckets, args.device == "gpu")
    except (ValueError, OSError) as exc:
        log.error("%s", exc)
        return 2
    log.info("wrote the %s policy repository %s; serve it with `python -m tools.serve --model-repository %s`", args.policy, out, out)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

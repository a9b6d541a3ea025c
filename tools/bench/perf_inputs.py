"""`python -m tools.bench.perf_inputs`: inputs for NVIDIA's perf_analyzer and a Model Analyzer config.

perf_analyzer's random data cannot drive `embed` (random bytes are not UTF-8 text) and
makes the encoder's token ids meaningless, so this writes `--input-data` files from the
project's own corpus (loadtest/data/corpus.tsv, English and Chinese, short and long):
- `embed.json`: one text per request (`TEXT`, BYTES `[1]`), cycling over the corpus;
- `encoder.json`: the same texts tokenized with the model's own tokenizer.json, padded or
  cut to `--seq-len` tokens (the encoder's batcher joins only equal shapes);
- `model-analyzer-<model>.yaml`: a Model Analyzer profile config per model, pointing at
  its file, launching our Triton image in Docker (see docker/README.md).
What each model takes is read from its config (TYPE_STRING input = texts, INT64 = ids).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import yaml
from tritonclient.grpc import model_config_pb2

from loadtest.corpus import load_corpus
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import ATTENTION_MASK, INPUT_IDS, TOKEN_INPUTS
from tools.paths import BUILD_DIR, MODEL_REPOSITORY
from tools.repo.model_config import ModelConfig, load_config
from tools.repo.variant import DEFAULT_OUT

log = logging.getLogger("perf_inputs")

DEFAULT_DIR = BUILD_DIR / "perf"
TRITON_IMAGE = "triton-embed:24.10"  # docker/compose.yaml's image: NGC Triton plus tokenizers


def corpus_texts(count: int) -> list[str]:
    """`count` texts, short and long interleaved, from the load-test corpus."""
    passages = load_corpus()
    short = [p.text for p in passages if p.length == "short"]
    long = [p.text for p in passages if p.length == "long"]
    ordered = [text for pair in zip(short, long) for text in pair]
    return [ordered[i % len(ordered)] for i in range(count)]


def text_input_data(config: ModelConfig, texts: list[str]) -> dict:
    (name,) = [i.name for i in config.input if i.data_type == model_config_pb2.TYPE_STRING]
    return {"data": [{name: {"content": [text], "shape": [1]}} for text in texts]}


def token_input_data(config: ModelConfig, texts: list[str], tokenizer_path: Path, sequence_length: int) -> dict:
    """INPUT_IDS and ATTENTION_MASK (INT64 `[-1]`), every entry of one length."""
    from tokenizers import Tokenizer

    names = {i.name for i in config.input if i.data_type == model_config_pb2.TYPE_INT64}
    if names != set(TOKEN_INPUTS):
        raise ValueError(f"model {config.name!r} does not take {' and '.join(TOKEN_INPUTS)} (it takes {sorted(names)})")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(sequence_length)
    tokenizer.enable_padding(length=sequence_length, pad_id=tokenizer.padding["pad_id"] if tokenizer.padding else 0)
    entries = []
    for encoding in tokenizer.encode_batch(texts):
        entries.append(
            {
                INPUT_IDS: {"content": encoding.ids, "shape": [sequence_length]},
                ATTENTION_MASK: {"content": encoding.attention_mask, "shape": [sequence_length]},
            }
        )
    return {"data": entries}


def model_analyzer_config(repository: Path, model: str, data: Path, out: Path, max_concurrency: int) -> dict:
    """Model Analyzer's profile config for one model: Triton launched from our image in Docker
    (it needs the tokenizers package that NVIDIA's plain image lacks), our input data."""
    return {
        "model_repository": str(repository.resolve()),
        "triton_launch_mode": "docker",
        "triton_docker_image": TRITON_IMAGE,
        "output_model_repository_path": str((out / f"model-analyzer-{model}" / "output_models").resolve()),
        "override_output_model_repository": True,
        "export_path": str((out / f"model-analyzer-{model}").resolve()),
        "run_config_search_max_concurrency": max_concurrency,
        "profile_models": {model: {"perf_analyzer_flags": {"input-data": str(data.resolve())}}},
    }


def write_inputs(out: Path, repository: Path, sequence_length: int, entries: int, max_concurrency: int) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    texts = corpus_texts(entries)
    documents = {
        "embed": text_input_data(load_config(MODEL_REPOSITORY / "embed"), texts),
        "encoder": token_input_data(
            load_config(MODEL_REPOSITORY / "encoder"), texts, MODEL_REPOSITORY / "tokenizer" / "1" / "tokenizer.json", sequence_length
        ),
    }
    files = {}
    for model, document in documents.items():
        files[model] = out / f"{model}.json"
        files[model].write_text(json.dumps(document, ensure_ascii=False))
    for model in documents:
        config = model_analyzer_config(repository, model, files[model], out, max_concurrency)
        files[f"model-analyzer-{model}"] = out / f"model-analyzer-{model}.yaml"
        files[f"model-analyzer-{model}"].write_text(yaml.safe_dump(config, sort_keys=False))
    return files


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.perf_inputs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help="folder for the files (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=128, help="encoder tokens per request (default %(default)s)")
    parser.add_argument("--entries", type=int, default=64, help="distinct requests perf_analyzer cycles over")
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=DEFAULT_OUT["gpu"],
        help="the repository Model Analyzer profiles (default: the GPU variant)",
    )
    parser.add_argument("--max-concurrency", type=int, default=64, help="Model Analyzer's concurrency search bound")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    if args.seq_len < 2 or args.entries < 1 or args.max_concurrency < 1:
        log.error("--seq-len must be at least 2, --entries and --max-concurrency at least 1")
        return 2
    try:
        files = write_inputs(args.out, args.model_repository, args.seq_len, args.entries, args.max_concurrency)
    except (ValueError, OSError) as exc:
        log.error("%s", exc)
        return 1
    for name, path in files.items():
        log.info("%-22s %s", name, path)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

"""The model folder infinity-emb serves: its optimum (ONNX Runtime) engine needs a plain ONNX
export, made once by optimum inside infinity's own virtual environment."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from tools.paths import BUILD_DIR

log = logging.getLogger("bench.gateway")


def model_folder() -> Path:
    from export.source_model import default_model_dir

    return Path(default_model_dir())


EXPORT_ONNX = """
import sys
from optimum.exporters.onnx import main_export
main_export(sys.argv[1], output=sys.argv[2], task="feature-extraction", no_post_process=True)
"""


def infinity_model_folder(venv: Path, engine: str) -> Path:
    """The model folder for infinity. Its ONNX engine (optimum) needs a plain ONNX export
    in the folder (hidden states out; our model.onnx pools inside the graph), so it gets a
    copy of the folder, files linked, plus `model.onnx` exported once by optimum in
    infinity's own environment (at the top: optimum matches the bare file name). The torch engine reads the folder as it is."""
    source = model_folder()
    if engine != "optimum":
        return source
    folder = BUILD_DIR / "infinity-model"
    if (folder / "model.onnx").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if not (folder / item.name).exists():
            (folder / item.name).symlink_to(item)
    log.info("exporting the model to ONNX for infinity's optimum engine (once, into %s)", folder)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", EXPORT_ONNX, str(source), str(folder / "onnx")], env=env, capture_output=True, text=True
    )
    if result.returncode != 0 or not (folder / "onnx" / "model.onnx").is_file():
        raise RuntimeError(f"optimum's ONNX export for infinity failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
    (folder / "onnx" / "model.onnx").rename(folder / "model.onnx")
    return folder

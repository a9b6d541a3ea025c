"""Trace the encoder with pooling and normalisation inside the graph into ONNX.

Named inputs and outputs (INPUT_IDS, ATTENTION_MASK -> EMBEDDING) with dynamic
batch and sequence axes are what config.pbtxt, the ensemble map and the load tools
share, so no anonymous ONNX names leak into the serving path.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from export.source_model import SourceModel
from tools.contract import EMBEDDING_OUTPUT, TOKEN_INPUTS

INPUT_NAMES = TOKEN_INPUTS  # the names every config, ensemble map and load tool uses (tools/contract.py)
OUTPUT_NAME = EMBEDDING_OUTPUT
OPSET = 17


class PooledEncoder(torch.nn.Module):
    """Transformer -> pooling -> (L2 normalisation): the sentence embedding in one module."""

    def __init__(self, transformer: torch.nn.Module, pooling: str, normalize: bool) -> None:
        super().__init__()
        self.transformer = transformer
        self.pooling = pooling
        self.normalize = normalize
        self.takes_token_types = "token_type_ids" in inspect.signature(transformer.forward).parameters

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = {"token_type_ids": torch.zeros_like(input_ids)} if self.takes_token_types else {}
        hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        if self.pooling == "cls":
            embedding = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            embedding = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if self.normalize:
            embedding = torch.nn.functional.normalize(embedding, p=2.0, dim=1)
        return embedding


def load_pooled_encoder(model: SourceModel) -> PooledEncoder:
    from transformers import AutoModel

    # Eager attention traces to plain ONNX ops without data-dependent branches.
    transformer = AutoModel.from_pretrained(str(model.path), attn_implementation="eager")
    return PooledEncoder(transformer, model.pooling, model.normalize).eval()


def export_onnx(encoder: PooledEncoder, destination: Path, opset: int = OPSET) -> None:
    sample = torch.ones((2, 16), dtype=torch.int64)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    axes[OUTPUT_NAME] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            (sample, sample),
            str(destination),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    import onnx

    onnx.checker.check_model(str(destination))

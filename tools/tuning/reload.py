"""Apply a candidate config to a running server through the model-control API.

`POST /v2/repository/models/<model>/load` with a JSON `config` override: Triton loads
the new config next to the old one and swaps when it is ready, so there is no
restart and the model repository on disk is never edited during a sweep.
"""

from __future__ import annotations

import logging

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tools.model_config import ModelConfig, to_override_json

log = logging.getLogger(__name__)


class ReloadError(RuntimeError):
    pass


def load_with_config(http_url: str, model: str, config: ModelConfig, headers: dict | None = None) -> None:
    client = httpclient.InferenceServerClient(http_url, network_timeout=300.0, connection_timeout=300.0)
    try:
        client.load_model(model, headers=headers, config=to_override_json(config))
        if not client.is_model_ready(model, headers=headers):
            raise ReloadError(f"{model} is not ready after loading the new config")
    except InferenceServerException as exc:
        raise ReloadError(f"loading {model} with the candidate config failed: {exc.message()}") from exc
    finally:
        client.close()


def reloads_refused(error: ReloadError) -> bool:
    """True when the server is not in explicit model-control mode (load/unload refused)."""
    return "not allowed" in str(error)

"""Apply a candidate config to a running server through the model-control API.

`POST /v2/repository/models/<model>/load` with a JSON `config` override: Triton loads
the new config next to the old one and swaps when it is ready, so there is no
restart and the model repository on disk is never edited during a sweep.

A sweep starts from the config the server runs (`GET /v2/models/<model>/config`), not
from the committed file: a GPU/TensorRT server runs another config than the committed
CPU one, and loading that into it would switch its backend or fail. The same config is
loaded back when the sweep ends, however it ends.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import tritonclient.http as httpclient
from google.protobuf import json_format
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


def served_config(http_url: str, model: str, headers: dict | None = None) -> ModelConfig:
    """The config `model` runs on the server now, as Triton completed it.

    Parsed strictly: a field this tritonclient's schema does not know could not be sent
    back, so the sweep could neither derive candidates from the config nor restore it."""
    client = httpclient.InferenceServerClient(http_url, network_timeout=60.0)
    try:
        document = client.get_model_config(model, headers=headers)
    except InferenceServerException as exc:
        raise ReloadError(f"cannot read the config of {model} from {http_url}: {exc.message()}") from exc
    finally:
        client.close()
    try:
        return json_format.ParseDict(document, ModelConfig())
    except json_format.ParseError as exc:
        raise ReloadError(
            f"the config of {model} on {http_url} has fields this tritonclient cannot represent ({exc}); "
            "upgrade tritonclient to the server's release so that the config can be restored exactly"
        ) from exc


@contextlib.contextmanager
def restoring(http_url: str, model: str, config: ModelConfig, headers: dict | None = None, hint: str = "") -> Iterator[None]:
    """Load `config` back when the block ends: normally, on an error or on Ctrl-C.

    A failed restore raises ReloadError; if the block is already failing, the restore
    failure is logged and the block's own error goes on. `hint` says how to restore by hand."""
    failing = False
    try:
        yield
    except BaseException:
        failing = True
        raise
    finally:
        try:
            load_with_config(http_url, model, config, headers)
            if served_config(http_url, model, headers) != config:
                log.warning("%s was reloaded with its earlier config, but the server now reports a different one", model)
            else:
                log.info("%s runs the config it ran before the sweep again", model)
        except ReloadError as exc:
            message = f"could not restore the earlier config of {model}: {exc}{'; ' + hint if hint else ''}"
            if not failing:
                raise ReloadError(message) from exc
            log.error("%s", message)

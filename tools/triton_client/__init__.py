"""The one client of Triton's control and observation endpoints (inference goes elsewhere).

Serve, the health watch, the tuner, the adaptive controller and the benchmark all
load models with a config override, read the config a server runs, wait for
readiness, and read statistics and metrics through this module, so each endpoint's
URL, timeout and error message live in one place. It speaks plain HTTP/JSON with the
standard library: a readiness poll must not need tritonclient's gevent pool, and every
failure, an error answer or none at all, becomes one `TritonError` naming the call.

`POST /v2/repository/models/<model>/load` with a JSON `config` override makes Triton
load the new config beside the old one and swap when it is ready: no restart, and the
model repository on disk is never edited. A sweep starts from the config the server
runs (`GET /v2/models/<model>/config`), not from the committed file: a GPU/TensorRT
server runs another config than the committed CPU one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf import json_format
from prometheus_client.parser import text_string_to_metric_families

from tools.cli.exit_status import ActionableError
from tools.repo.model_config import ModelConfig, to_override_json
from tools.triton_client.readiness import http_ok, wait_for_http_ok
from tools.triton_client.stats import ModelStats

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 300.0  # loading a model (an ONNX session, a TensorRT engine) can take minutes
# An unload of `llm` usually ends within a second (finalize takes 0.0 s), but one outlasted 30 s
# on a busy 2-core machine; the hung instances of docs/llm.md's Known issues never reached
# finalize at all (not in 120 s, nor at the server's exit). So an unload counts as stuck only
# after 120 s, twice what a machine twice as slow and busy would take, and a slow one is reported.
UNLOAD_WAIT_S = 120.0
SLOW_UNLOAD_S = 5.0  # an unload that takes longer is logged with its time
CALL_TIMEOUT_S = 10.0
PROBE_MODEL = "__model_control_probe__"  # never a real model: unloading it changes nothing

MetricSample = tuple[str, dict[str, str], float]  # (name, labels, value); a counter by its family name


@dataclass(frozen=True)
class Unload:
    """How a reload's old instance went: `seconds` until the repository index no longer listed
    it as loaded (0.0 when nothing was loaded), None when it was still there at the limit.
    True when it unloaded, so `if not client.reload(...)` reads as "the old one stayed"."""

    seconds: float | None

    def __bool__(self) -> bool:
        return self.seconds is not None


class TritonError(ActionableError):
    """A Triton endpoint answered with an error (`status` is its HTTP status) or did not
    answer at all (`status` None); the message names the call and the server's reason."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def reloads_refused(self) -> bool:
        """The server is not in explicit model-control mode (load/unload not allowed)."""
        return "not allowed" in str(self)

    @property
    def restricted(self) -> bool:
        """The model-control API wants the admin key (tools/serve/admin_key.py)."""
        return "restricted" in str(self)


def parse_metrics(text: str) -> list[MetricSample]:
    """Samples of Prometheus' text format, through prometheus_client's own parser.

    That parser names every counter sample `<family>_total` whether the page did or not
    (Triton's `nv_inference_count` has no suffix, our backend's `ort_rows_total` has one),
    so a counter is given here by its family name, the same either way: `nv_inference_count`,
    `ort_rows`. Other samples keep their names (`..._sum`, `..._count` of a summary)."""
    try:
        return [
            (family.name if family.type == "counter" else sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if family.type != "counter" or sample.name == f"{family.name}_total"  # not a counter's `_created`
        ]
    except ValueError as exc:
        raise TritonError(f"unparsable Prometheus metrics: {exc}") from exc


def fetch_metrics(metrics_url: str, timeout_s: float = CALL_TIMEOUT_S) -> list[MetricSample]:
    """Every sample of a Prometheus endpoint (Triton's metrics port, a backend's counters on it)."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
            text = response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        raise TritonError(f"reading the metrics at {metrics_url}: {_reason(exc)}", exc.code) from None
    except (OSError, ValueError) as exc:
        raise TritonError(f"reading the metrics: no answer from {metrics_url} ({getattr(exc, 'reason', exc)})") from None
    return parse_metrics(text)


def metric_total(samples: list[MetricSample], name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels` (e.g. model="encoder")."""
    return sum(value for sample, have, value in samples if sample == name and labels.items() <= have.items())


def _reason(error: urllib.error.HTTPError) -> str:
    """Triton's `{"error": "..."}` body, or the bare HTTP reason."""
    try:
        body = error.read().decode(errors="replace")
    except OSError:
        body = ""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.strip() or f"HTTP {error.code} {error.reason}"


@dataclass(frozen=True)
class TritonClient:
    """Endpoints of one server: `http_url` is host:port; `headers` carry the admin key
    for the model-control API when it is restricted (build such a client with
    tools.serve.local_triton.triton_client, the one place that knows the header); `metrics_url`
    is the full URL of the Prometheus endpoint (its own port)."""

    http_url: str
    headers: dict[str, str] | None = None
    metrics_url: str | None = None

    def _call(self, what: str, path: str, body: dict | None = None, timeout_s: float = CALL_TIMEOUT_S) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {**(self.headers or {}), **({"Content-Type": "application/json"} if data else {})}
        request = urllib.request.Request(self._url(path), data=data, headers=headers, method="POST" if data else "GET")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise TritonError(f"{what} on {self.http_url}: {_reason(exc)}", exc.code) from None
        except (OSError, ValueError) as exc:  # URLError, refused, reset, timed out
            raise TritonError(f"{what}: no answer from {self.http_url} ({getattr(exc, 'reason', exc)})") from None

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else f"http://{self.http_url}{path}"

    def _json(self, what: str, path: str, body: dict | None = None) -> object:
        answer = self._call(what, path, body)
        try:
            return json.loads(answer)
        except ValueError as exc:
            raise TritonError(f"{what} on {self.http_url}: the answer is not JSON ({exc})") from None

    # readiness

    def server_ready(self) -> bool:
        return http_ok(self._url("/v2/health/ready"))

    def model_ready(self, model: str) -> bool:
        return http_ok(self._url(f"/v2/models/{model}/ready"))

    def wait_until_ready(
        self,
        timeout_s: float,
        model: str | None = None,
        process: subprocess.Popen | None = None,
        stop: threading.Event | None = None,
    ) -> bool:
        """True once the server (or `model` on it) is ready; False at the deadline, when
        `process` (the server, if we started it) exits, or when `stop` is set."""
        path = f"/v2/models/{model}/ready" if model else "/v2/health/ready"
        return wait_for_http_ok(self._url(path), timeout_s, process, interval_s=0.25, stop=stop)

    # model control

    def load(self, model: str, config: ModelConfig | None = None) -> None:
        """Load `model`, with `config` as an override when given, and check it is ready."""
        body: dict = {"parameters": {"config": to_override_json(config)}} if config is not None else {}
        what = f"loading {model}" + (" with a config override" if config is not None else "")
        self._call(what, f"/v2/repository/models/{model}/load", body, timeout_s=LOAD_TIMEOUT_S)
        if not self.model_ready(model):
            raise TritonError(f"{model} is not ready on {self.http_url} after loading it")

    def unload(self, model: str) -> None:
        self._call(f"unloading {model}", f"/v2/repository/models/{model}/unload", {}, timeout_s=LOAD_TIMEOUT_S)

    def reload(self, model: str, config: ModelConfig, unload_timeout_s: float = UNLOAD_WAIT_S) -> Unload:
        """Unload `model` (when loaded), wait until the server's repository index no longer
        lists it as loaded, then load it with `config`. Returns how long the unload took, None
        when the old instance was still there at the limit: Triton 2.51 never finishes
        unloading a model whose gRPC stream state leaked (a client cancelling an answered
        stream: tools/triton_client/streams.py; docs/llm.md, "Known issues"); the new one is
        loaded all the same, beside it, and a warning says so. A slow unload is logged."""
        if not self.model_ready(model):
            self.load(model, config)
            return Unload(0.0)
        started = time.monotonic()
        self.unload(model)
        while unloading := self._still_loaded(model):
            if time.monotonic() - started >= unload_timeout_s:
                break
            time.sleep(0.2)  # between two reads of the index
        took = time.monotonic() - started
        if unloading:
            log.warning(
                "%s did not finish unloading within %.0f s; loading the new config beside it (the old instance stays until "
                "the server stops: docs/llm.md, Known issues)",
                model,
                unload_timeout_s,
            )
        elif took > SLOW_UNLOAD_S:
            log.warning("%s took %.1f s to unload (usually under a second): a busy machine, or a slow finalize", model, took)
        self.load(model, config)
        return Unload(None if unloading else round(took, 1))

    def _still_loaded(self, model: str) -> bool:
        return any(item.get("name") == model and item.get("state") in ("READY", "UNLOADING") for item in self.repository_index())

    def repository_index(self) -> list[dict]:
        """The repository's models with their state (needs the admin key when restricted)."""
        index = self._json("reading the repository index", "/v2/repository/index", {})
        return index if isinstance(index, list) else []

    def ready_models(self) -> set[str]:
        return {item["name"] for item in self.repository_index() if item.get("state") == "READY"}

    def model_control_problem(self) -> str | None:
        """Why this server would refuse reloads (None when it accepts them), asked without
        touching a model: Triton 2.51 answers the unload of a model it does not know with 200
        in explicit mode, 503 "... not allowed if polling is enabled" in the `none` and `poll`
        modes alike, 403 without the admin key."""
        try:
            self.unload(PROBE_MODEL)
        except TritonError as exc:
            if exc.reloads_refused:
                return (
                    f"the server at {self.http_url} is not in explicit model-control mode, so it cannot apply a new "
                    "config; start it with --model-control-mode explicit"
                )
            if exc.restricted:
                return f"the model-control API of {self.http_url} is restricted: pass its key with --admin-key-file ({exc})"
            return f"the model-control API of {self.http_url} refused a harmless request: {exc}"
        return None

    def config(self, model: str, strict: bool = True) -> ModelConfig:
        """The config `model` runs now, as Triton completed it.

        Strict by default: a field this tritonclient's schema does not know could not be
        sent back, so a sweep could neither derive candidates from the config nor restore it.
        A reader that only looks (warm-up counts) passes strict=False."""
        document = self._json(f"reading the config of {model}", f"/v2/models/{model}/config")
        try:
            return json_format.ParseDict(document, ModelConfig(), ignore_unknown_fields=not strict)
        except json_format.ParseError as exc:
            raise TritonError(
                f"the config of {model} on {self.http_url} has fields this tritonclient cannot represent ({exc}); "
                "upgrade tritonclient to the server's release so that the config can be restored exactly"
            ) from exc

    @contextlib.contextmanager
    def restoring(self, model: str, config: ModelConfig, hint: str = "") -> Iterator[None]:
        """Load `config` back when the block ends: normally, on an error or on Ctrl-C.

        A failed restore raises TritonError; if the block is already failing, the restore
        failure is logged and the block's own error goes on. `hint` says how to restore by hand."""
        failing = False
        try:
            yield
        except BaseException:
            failing = True
            raise
        finally:
            try:
                self.load(model, config)
                if self.config(model) != config:
                    log.warning("%s was reloaded with its earlier config, but the server now reports a different one", model)
                else:
                    log.info("%s runs the config it ran before the sweep again", model)
            except TritonError as exc:
                message = f"could not restore the earlier config of {model}: {exc}{'; ' + hint if hint else ''}"
                if not failing:
                    raise TritonError(message) from exc
                log.error("%s", message)

    # observation

    def statistics_document(self, model: str) -> dict:
        """The `/v2/models/<model>/stats` document (all versions)."""
        document = self._json(f"reading the statistics of {model}", f"/v2/models/{model}/stats")
        return document if isinstance(document, dict) else {}

    def statistics(self, model: str) -> ModelStats:
        return ModelStats.from_document(self.statistics_document(model))

    def settled_statistics(self, model: str, quiet_s: float = 0.2, timeout_s: float = 10.0) -> ModelStats:
        """Counters once they stop moving: Triton may record a request's statistics after its
        response has reached the client, so a snapshot taken right after a response can miss it.
        Returns the last snapshot if traffic never pauses for `quiet_s` within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        latest = self.statistics(model)
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            previous, latest = latest, self.statistics(model)
            if latest == previous:
                break
        return latest

    def metrics(self) -> list[MetricSample]:
        """Every sample of the Prometheus endpoint."""
        if not self.metrics_url:
            raise TritonError(f"no metrics URL is known for the server at {self.http_url}")
        return fetch_metrics(self.metrics_url)

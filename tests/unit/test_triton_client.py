"""The Triton endpoints client without a server: its error mapping against canned HTTP
answers (Triton 2.51's own messages), and metrics parsing on a captured /metrics page."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from google.protobuf import json_format

from tools.observe.metrics_summary import metrics_by_model
from tools.observe.padding_waste import PaddingCounts
from tools.ports import free_ports
from tools.repo.model_config import ModelConfig, config_from_dict
from tools.triton_client import TritonClient, TritonError, metric_total, parse_metrics

CAPTURED = (Path(__file__).parent / "data" / "triton_metrics.txt").read_text()  # Triton 2.51 after 3 embed requests
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
RESTRICTED = "This API is restricted, expecting header 'triton-admin-key'"


class CannedTriton(ThreadingHTTPServer):
    """Answers each path with a canned (status, body), or with a list of them in turn (the last
    one from then on), and records what it was sent."""

    def __init__(self, answers: dict[str, tuple[int, str] | list[tuple[int, str]]]) -> None:
        self.answers = answers
        self.received: list[tuple[str, Message, bytes]] = []
        super().__init__(("127.0.0.1", 0), CannedHandler)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class CannedHandler(BaseHTTPRequestHandler):
    server: CannedTriton

    def answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append((self.path, self.headers, body))
        answer = self.server.answers.get(self.path, (404, json.dumps({"error": f"no route {self.path}"})))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        status, text = answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text.encode())

    do_GET = do_POST = answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[CannedTriton]:
    server = CannedTriton({})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def error(message: str) -> str:
    return json.dumps({"error": message})


def test_a_load_sends_the_config_as_a_json_override_with_the_admin_key(canned) -> None:
    canned.answers["/v2/repository/models/encoder/load"] = (200, "")
    canned.answers["/v2/models/encoder/ready"] = (200, "")
    config = config_from_dict({"name": "encoder", "max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}})
    TritonClient(canned.url, {"triton-admin-key": "k"}).load("encoder", config)
    path, headers, body = canned.received[0]
    assert path == "/v2/repository/models/encoder/load"
    sent = json_format.Parse(json.loads(body)["parameters"]["config"], ModelConfig())
    assert sent == config and headers.get("triton-admin-key") == "k"


def test_an_error_answer_carries_the_servers_reason_the_call_and_the_status(canned) -> None:
    canned.answers["/v2/repository/models/encoder/load"] = (400, error("failed to load 'encoder': bad max_batch_size"))
    with pytest.raises(TritonError, match=r"loading encoder with a config override on .*: failed to load 'encoder'") as caught:
        TritonClient(canned.url).load("encoder", ModelConfig(name="encoder"))
    assert caught.value.status == 400


def test_a_load_that_leaves_the_model_unready_is_an_error(canned) -> None:
    canned.answers["/v2/repository/models/encoder/load"] = (200, "")
    canned.answers["/v2/models/encoder/ready"] = (400, "")
    with pytest.raises(TritonError, match="not ready"):
        TritonClient(canned.url).load("encoder")


def test_refused_reloads_and_a_missing_key_are_told_apart(canned) -> None:
    client = TritonClient(canned.url)
    canned.answers["/v2/repository/models/__model_control_probe__/unload"] = (503, error(NOT_ALLOWED))
    assert "--model-control-mode explicit" in client.model_control_problem()
    canned.answers["/v2/repository/models/__model_control_probe__/unload"] = (403, error(RESTRICTED))
    assert "--admin-key-file" in client.model_control_problem()
    canned.answers["/v2/repository/models/__model_control_probe__/unload"] = (200, "")
    assert client.model_control_problem() is None
    with pytest.raises(TritonError) as caught:
        canned.answers["/v2/repository/models/m/unload"] = (503, error(NOT_ALLOWED))
        client.unload("m")
    assert caught.value.reloads_refused and not caught.value.restricted


def test_a_body_that_is_not_json_is_the_reason_as_it_came(canned) -> None:
    canned.answers["/v2/models/embed/stats"] = (500, "upstream broke")
    with pytest.raises(TritonError, match="upstream broke"):
        TritonClient(canned.url).statistics("embed")


def test_no_server_is_an_error_without_a_status() -> None:
    (port,) = free_ports(1)
    client = TritonClient(f"127.0.0.1:{port}", metrics_url=f"http://127.0.0.1:{port}/metrics")
    with pytest.raises(TritonError, match="no answer") as caught:
        client.config("encoder")
    assert caught.value.status is None
    with pytest.raises(TritonError, match="no answer"):
        client.metrics()
    assert not client.server_ready() and not client.model_ready("embed")


def test_the_served_config_is_parsed_strictly_unless_asked_otherwise(canned) -> None:
    document = {"name": "encoder", "max_batch_size": 8, "a_field_of_a_newer_release": 1}
    canned.answers["/v2/models/encoder/config"] = (200, json.dumps(document))
    client = TritonClient(canned.url)
    with pytest.raises(TritonError, match="cannot represent"):
        client.config("encoder")
    assert client.config("encoder", strict=False).max_batch_size == 8


def test_statistics_come_back_as_model_stats(canned) -> None:
    document = {"model_stats": [{"inference_count": 6, "execution_count": 2, "inference_stats": {"success": {"count": 3}}}]}
    canned.answers["/v2/models/encoder/stats"] = (200, json.dumps(document))
    stats = TritonClient(canned.url).statistics("encoder")
    assert (stats.requests, stats.average_batch_size) == (3, 3.0)


def test_the_readiness_wait_ends_when_the_server_answers_or_its_process_exits(canned) -> None:
    canned.answers["/v2/models/embed/ready"] = (200, "")
    assert TritonClient(canned.url).wait_until_ready(10, model="embed")
    (port,) = free_ports(1)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    assert not TritonClient(f"127.0.0.1:{port}").wait_until_ready(600, process=exited)  # at once, not after 600 s
    stop = threading.Event()
    stop.set()
    assert not TritonClient(f"127.0.0.1:{port}").wait_until_ready(600, stop=stop)


def test_captured_metrics_parse_with_labels_per_model() -> None:
    samples = parse_metrics(CAPTURED)
    assert metric_total(samples, "nv_inference_request_success", model="embed") == 3
    assert metric_total(samples, "nv_inference_pending_request_count") == 0
    models = metrics_by_model(samples)
    assert set(models) == {"embed", "tokenizer", "encoder"}
    assert set(models["encoder"].failures) >= {"REJECTED", "BACKEND"}, "failure counters are kept by reason"
    padding = PaddingCounts.from_samples(samples, "encoder")
    assert padding.rows > 0 and padding.real_tokens > 0, "our backend's own counters on the same page"


def test_text_that_is_not_prometheus_is_an_error() -> None:
    with pytest.raises(TritonError, match="unparsable"):
        parse_metrics('nv_inference_count{model="m" 7\n')


@pytest.mark.parametrize(("state", "gone_in_time"), [("UNAVAILABLE", True), ("UNLOADING", False)])
def test_a_reload_waits_for_the_unload_and_warns_when_the_old_instance_stays(canned, caplog, state, gone_in_time) -> None:
    canned.answers["/v2/models/llm/ready"] = (200, "")
    canned.answers["/v2/repository/models/llm/unload"] = (200, "")
    canned.answers["/v2/repository/models/llm/load"] = (200, "")
    canned.answers["/v2/repository/index"] = (200, json.dumps([{"name": "llm", "version": "1", "state": state}]))
    unload = TritonClient(canned.url).reload("llm", ModelConfig(name="llm"), unload_timeout_s=0.5)
    assert bool(unload) is gone_in_time
    assert (unload.seconds is not None and unload.seconds < 0.5) if gone_in_time else unload.seconds is None
    paths = [path for path, _, _ in canned.received]
    unload, index, load = (paths.index(f"/v2/repository/{what}") for what in ("models/llm/unload", "index", "models/llm/load"))
    assert unload < index < load
    assert ("did not finish unloading" in caplog.text) is not gone_in_time


def test_a_slow_unload_that_finishes_is_reported_with_its_time_not_counted_stuck(canned, caplog, monkeypatch) -> None:
    import tools.triton_client as triton_client

    monkeypatch.setattr(triton_client, "SLOW_UNLOAD_S", 0.1)
    canned.answers["/v2/models/llm/ready"] = (200, "")
    canned.answers["/v2/repository/models/llm/unload"] = (200, "")
    canned.answers["/v2/repository/models/llm/load"] = (200, "")
    unloading = json.dumps([{"name": "llm", "version": "1", "state": "UNLOADING"}])
    gone = json.dumps([{"name": "llm", "version": "1", "state": "UNAVAILABLE"}])
    canned.answers["/v2/repository/index"] = [(200, unloading), (200, unloading), (200, gone)]
    unload = TritonClient(canned.url).reload("llm", ModelConfig(name="llm"), unload_timeout_s=60)
    assert unload and unload.seconds is not None and unload.seconds >= 0.2  # two reads of the index said it was unloading
    assert "took" in caplog.text and "to unload" in caplog.text
    assert "did not finish unloading" not in caplog.text

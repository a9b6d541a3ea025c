"""Padding policies on the real local Triton: ragged and bucket batching serve correctly,
and the backend's padding counters count what was computed."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tools.embed import EmbeddingClient
from tools.load.requests import token_tensors
from tools.observe.padding_waste import PaddingCounts
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.length_policy import policy_configs
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

MIN_COSINE = 0.9999
# A run is worth 10 padding tokens: pinned, so the split of a query from a passage is certain
# whatever the machine measures (the calibrated curve is tested in tests/unit/test_ragged_split.py).
PINNED_COST = {"split_cost_per_run_us": "1000", "split_cost_per_token_us": "100"}
_unique = itertools.count()


def short_text() -> str:
    return f"query {next(_unique)} about batching"


def long_text() -> str:
    return f"passage {next(_unique)}: " + "Dynamic batching joins requests that arrive close together into one execution. " * 14


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


class PolicyServer:
    """One explicit-control server whose padding policy the tests switch by live reloads."""

    def __init__(self, server) -> None:
        self.options, self.client, self.policy = server.options, server.client, ("committed", 0)

    def use(self, policy: str, join_delay_us: int = 0) -> None:
        """Load `policy`; with `join_delay_us`, the encoder runs one instance whose batcher
        waits that long with no preferred sizes, so concurrent requests share an execution
        whatever batching the committed config has."""
        if (policy, join_delay_us) == self.policy:
            return
        tokenizer, encoder = policy_configs(MODEL_REPOSITORY, policy)
        for key, value in PINNED_COST.items():
            encoder.parameters[key].string_value = value
        if join_delay_us:
            del encoder.instance_group[1:]
            encoder.instance_group[0].count = 1
            del encoder.dynamic_batching.preferred_batch_size[:]
            encoder.dynamic_batching.max_queue_delay_microseconds = join_delay_us
        control = self.client
        control.load("encoder", encoder)
        control.load("tokenizer", tokenizer)
        self.policy = (policy, join_delay_us)

    def counts(self) -> PaddingCounts:
        return PaddingCounts.settled(self.options.metrics_url)


@pytest.fixture(scope="module")
def policy_server(explicit_triton) -> Iterator[PolicyServer]:
    """The session's explicit-control server; the committed configs are loaded back afterwards."""
    server = PolicyServer(explicit_triton)
    try:
        yield server
    finally:
        control = explicit_triton.client
        control.load("encoder")
        control.load("tokenizer")


def embed_concurrently(url: str, texts: list[str]) -> np.ndarray:
    def one(text: str) -> np.ndarray:
        client = EmbeddingClient("grpc", url)
        try:
            return client.embed([text])[0]
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        return np.stack(list(pool.map(one, texts)))


def test_ragged_batches_join_queries_and_passages_and_serve_sentence_transformers_embeddings(policy_server, reference_model) -> None:
    policy_server.use("ragged")
    before, stats_before = policy_server.counts(), ModelStats.settled(policy_server.options.http_url, "encoder")
    texts: list[str] = []
    served: list[np.ndarray] = []
    for _ in range(10):  # rounds of concurrent traffic until one execution joined different lengths
        round_texts = [short_text() if i % 4 else long_text() for i in range(16)]
        served.append(embed_concurrently(policy_server.options.grpc_url, round_texts))
        texts += round_texts
        if (policy_server.counts() - before).ragged_executions > 0:
            break
    delta = policy_server.counts() - before
    stats = ModelStats.settled(policy_server.options.http_url, "encoder") - stats_before
    assert delta.ragged_executions > 0, "no execution joined requests of different lengths"
    assert max(stats.batch_executions) > 1, stats.batch_executions
    assert delta.runs > stats.executions, "some execution was split into a query run and a passage run"
    assert delta.waste < 0.15, delta  # each row padded only within its own sub-run
    expected = reference_model.encode(texts, convert_to_numpy=True)
    assert cosine(np.concatenate(served), expected).min() >= MIN_COSINE


def test_one_ragged_request_keeps_its_rows_in_order_across_sub_runs(policy_server, reference_model) -> None:
    policy_server.use("ragged")
    texts = [long_text(), short_text(), long_text(), short_text()]
    client = EmbeddingClient("http", policy_server.options.http_url)
    try:
        served = client.embed(texts)
    finally:
        client.close()
    assert cosine(served, reference_model.encode(texts, convert_to_numpy=True)).min() >= MIN_COSINE


def test_a_short_request_is_answered_before_a_long_one_of_the_same_execution_ends(policy_server) -> None:
    """Sub-runs go shortest first and each response leaves when its rows are done."""
    policy_server.use("ragged", join_delay_us=100_000)
    url = policy_server.options.grpc_url
    rng = np.random.default_rng(5)
    for _ in range(20):  # until both requests land in one execution (the server's counters say so)
        before = policy_server.counts()
        done: dict[str, float] = {}

        def send(name: str, rows: int, length: int, done: dict = done) -> None:
            client = grpcclient.InferenceServerClient(url)
            ids = rng.integers(1000, 30_000, size=(rows, length))
            client.infer("encoder", token_tensors(grpcclient, ids))
            done[name] = time.perf_counter()
            client.close()

        # the long request's sub-run takes hundreds of milliseconds, so a client thread that a busy
        # machine wakes late cannot reverse the order its answer left the server in
        with ThreadPoolExecutor(max_workers=2) as pool:
            pool.submit(send, "long", 16, 384)
            pool.submit(send, "short", 1, 8)
        delta = policy_server.counts() - before
        if delta.ragged_executions == 1 and delta.runs == 2:
            assert done["short"] < done["long"]
            return
    pytest.fail("the two requests never shared an execution in 20 tries")


def test_buckets_pad_each_request_to_its_bucket_and_the_counters_say_so(policy_server, reference_model) -> None:
    policy_server.use("buckets")
    client = EmbeddingClient("grpc", policy_server.options.grpc_url)
    try:
        for words, bucket in ((3, 16), (20, 32), (50, 64)):  # one request at a time: one execution each
            text = " ".join(["batch"] * words)  # one token per word, plus [CLS] and [SEP]
            before = policy_server.counts()
            served = client.embed([text])
            delta = policy_server.counts() - before
            assert (delta.real_tokens, delta.padding_tokens, delta.rows) == (words + 2, bucket - words - 2, 1)
            assert cosine(served, reference_model.encode([text], convert_to_numpy=True))[0] >= MIN_COSINE
    finally:
        client.close()


def test_bucket_batches_serve_mixed_lengths_correctly(policy_server, reference_model) -> None:
    policy_server.use("buckets")
    texts = [short_text() if i % 3 else long_text() for i in range(12)]
    served = embed_concurrently(policy_server.options.grpc_url, texts)
    assert cosine(served, reference_model.encode(texts, convert_to_numpy=True)).min() >= MIN_COSINE


def test_padding_counters_count_tokens_sent_straight_to_the_encoder(triton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    ids = np.full((2, 10), 2000)
    mask = np.array([[1] * 7 + [0] * 3, [1] * 10])
    before = PaddingCounts.settled(triton.metrics_url)
    try:
        client.infer("encoder", token_tensors(grpcclient, ids, mask))
    finally:
        client.close()
    delta = PaddingCounts.settled(triton.metrics_url) - before
    assert (delta.real_tokens, delta.rows) == (17, 2)
    # The committed ragged encoder runs the rows together (3 padding tokens) or, when its
    # measured cost model says two runs are cheaper, each at its own length (no padding).
    assert (delta.padding_tokens, delta.runs) in {(3, 1), (0, 2)}, delta
    assert delta.waste == pytest.approx(delta.padding_tokens / 17)


def test_a_tiny_length_benchmark_writes_its_report(tmp_path) -> None:
    command = [
        sys.executable,
        "-m",
        "tools.bench.lengths",
        "--policies",
        "batch,ragged",
        "--concurrency",
        "4",
        "--rate-fraction",
        "0.5",
        "--warmup",
        "0.5",
        "--window",
        "1",
        "--max-windows",
        "2",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(row["policy"], row["traffic"].split()[0]) for row in report["rows"]] == [
        ("batch", "concurrency"),
        ("batch", "poisson"),
        ("ragged", "concurrency"),
        ("ragged", "poisson"),
    ]
    for row in report["rows"]:
        assert row["outcomes"].get("ok", 0) > 0 and row["padding"]["real_tokens"] > 0
        assert row["server"]["embed"]["cache_hits"] == 0, "every level sends texts the cache has never seen"
        assert set(row["per_length_class"]) <= {"short", "long"} and row["useful_tokens_per_s"] > 0
    assert report["raw_engine"]["best_tokens_per_s"] > 0 and report["cpu"]["model"]
    markdown = (tmp_path / "report.md").read_text()
    assert "| ragged | concurrency 4 |" in markdown and "packing eff." in markdown

"""More texts than the model's max_batch_size go out as several requests, answered in order."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tools.embed import EmbeddingClient
from tools.paths import REPO_ROOT
from tools.serve.local_triton import ServerOptions
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_long_list_is_split_by_max_batch_size_and_keeps_its_order(triton: ServerOptions, protocol: str) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    with EmbeddingClient(protocol, url) as client:
        limit = client.max_batch_size()
        texts = [f"{protocol} split text number {index}" for index in range(2 * limit + 3)]
        before = ModelStats.settled(triton.http_url, "embed")
        rows = client.embed(texts)
        requests = (ModelStats.settled(triton.http_url, "embed") - before).requests
        alone = client.embed([texts[limit + 1]])[0]
    assert rows.shape == (len(texts), 384)
    assert requests == math.ceil(len(texts) / limit) == 3
    assert float(np.dot(rows[limit + 1], alone)) > 0.9999, "row i is the embedding of text i"


def test_the_cli_reads_texts_from_stdin(triton: ServerOptions) -> None:
    command = [sys.executable, "-m", "tools.embed", "--url", triton.http_url, "--json", "-"]
    result = subprocess.run(command, input="one\n\ntwo\nthree\n", cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert np.array(json.loads(result.stdout)["embeddings"]).shape == (3, 384)

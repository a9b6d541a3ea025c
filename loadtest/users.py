"""Locust users that call Triton through tritonclient and report every call to locust.

Locust only measures what it is told: these users time each call with `perf_counter`
and fire `events.request` for successes and failures alike, named `<model>/<traffic>`
with the protocol as the request type, so the stats table has one row per model,
traffic class and protocol, and a rejection shows the server's own message.
"""

from __future__ import annotations

import random
import time

import gevent
from locust import User, task
from tritonclient.utils import InferenceServerException

from loadtest.corpus import TextSampler, load_corpus
from tools.contract import EMBEDDING_OUTPUT
from tools.embed import client_module, text_input

_CORPUS = load_corpus()


class TritonCallError(Exception):
    """A failed call; its repr is the server's message, which is what locust's failure table shows."""

    def __repr__(self) -> str:
        return str(self)


class TritonUser(User):
    """One client connection; subclasses pick the protocol and the traffic class."""

    abstract = True
    protocol = "http"
    traffic = "default"
    priority = 0  # 0 = the model's default level; 1 is the highest
    length = "short"  # which corpus texts: "short" or "long"

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.model = options.model
        self.texts_per_request = 1
        self.queue_timeout_us: int | None = None
        self.client_timeout_s = float(options.client_timeout_s)
        self.mean_wait_s = float(options.wait_ms) / 1000.0
        self.sampler = TextSampler(_CORPUS, repeat_share=float(options.repeat_share), rng=random.Random())
        self.module = client_module(self.protocol)
        self.configure(options)
        self.client = self.connect(options)

    def configure(self, options) -> None:
        """Per traffic class: texts per request, queue timeout."""

    def connect(self, options):
        raise NotImplementedError

    def on_stop(self) -> None:
        self.client.close()

    def wait_time(self) -> float:
        """Exponential think time: each user's requests arrive as a Poisson process."""
        return random.expovariate(1.0 / self.mean_wait_s) if self.mean_wait_s > 0 else 0.0

    def call_options(self) -> dict:
        return {}

    @task
    def embed(self) -> None:
        texts = self.sampler.sample(self.length, self.texts_per_request)
        inputs = [text_input(self.module, texts)]
        outputs = [self.module.InferRequestedOutput(EMBEDDING_OUTPUT)]
        exception: Exception | None = None
        length = 0
        start = time.perf_counter()
        try:
            result = self.client.infer(
                self.model, inputs, outputs=outputs, priority=self.priority, timeout=self.queue_timeout_us, **self.call_options()
            )
            embeddings = result.as_numpy(EMBEDDING_OUTPUT)
            if embeddings is None or embeddings.shape[0] != len(texts):
                raise TritonCallError(f"expected {len(texts)} embeddings, got {None if embeddings is None else embeddings.shape}")
            length = embeddings.nbytes
        except InferenceServerException as exc:
            exception = TritonCallError(str(exc))
        except Exception as exc:  # a network error is a failed request too, never a crashed user
            exception = TritonCallError(f"{type(exc).__name__}: {exc}")
        elapsed_ms = (time.perf_counter() - start) * 1000.0
        self.environment.events.request.fire(
            request_type=self.protocol,
            name=f"{self.model}/{self.traffic}",
            response_time=elapsed_ms,
            response_length=length,
            exception=exception,
            context={"priority": self.priority, "texts": len(texts)},
        )


class HttpMixin:
    protocol = "http"

    def connect(self, options):
        # tritonclient.http runs on geventhttpclient: cooperative under locust as it is.
        return self.module.InferenceServerClient(
            options.triton_http_url, connection_timeout=self.client_timeout_s, network_timeout=self.client_timeout_s
        )


class GrpcMixin:
    protocol = "grpc"

    def connect(self, options):
        # Under gevent, gRPC needs grpc.experimental.gevent.init_gevent() before the first
        # channel (the locustfile does it), and then each blocking call occupies a thread of
        # gevent's hub threadpool, 10 by default: beyond 10 gRPC users, calls would queue
        # inside the client. One thread per gRPC user keeps the client out of the numbers.
        gevent.get_hub().threadpool.maxsize += 1
        return self.module.InferenceServerClient(options.triton_grpc_url)

    def call_options(self) -> dict:
        return {"client_timeout": self.client_timeout_s}


class InteractiveUser(TritonUser):
    """Short queries at the highest priority: overload rejects them quickly (the level-1 queue
    timeout, REJECT policy, or a lower --interactive-timeout-ms) instead of letting them wait."""

    abstract = True
    traffic = "interactive"
    priority = 1
    length = "short"

    def configure(self, options) -> None:
        timeout_ms = int(options.interactive_timeout_ms)
        self.queue_timeout_us = timeout_ms * 1000 if timeout_ms > 0 else None


class BulkUser(TritonUser):
    """Several long passages per request at the lowest priority (indexing jobs)."""

    abstract = True
    traffic = "bulk"
    priority = 2
    length = "long"

    def configure(self, options) -> None:
        self.texts_per_request = max(1, int(options.bulk_texts))


class InteractiveHttpUser(HttpMixin, InteractiveUser):
    abstract = False


class InteractiveGrpcUser(GrpcMixin, InteractiveUser):
    abstract = False


class BulkHttpUser(HttpMixin, BulkUser):
    abstract = False


class BulkGrpcUser(GrpcMixin, BulkUser):
    abstract = False


USER_CLASSES = (InteractiveHttpUser, InteractiveGrpcUser, BulkHttpUser, BulkGrpcUser)


def apply_weights(interactive: int, bulk: int) -> None:
    """Locust reads `weight` when it dispatches users, so setting it at test start is enough."""
    if interactive < 0 or bulk < 0 or interactive + bulk == 0:
        raise ValueError("user weights must be non-negative and not both zero")
    for cls in USER_CLASSES:
        cls.weight = interactive if issubclass(cls, InteractiveUser) else bulk

"""The ASGI app: OpenAI's `/v1/embeddings`, `/v1/completions`, `/v1/chat/completions` and
`/v1/models` in front of Triton's `embed` and `llm`.

Clients post JSON once; the gateway talks binary gRPC to Triton, whose dynamic batcher
still does the batching. Every answer other than 200 is an OpenAI error object
(gateway.errors); `/health` is ready only when Triton says the model is, and `/metrics`
exposes the gateway's own Prometheus metrics. Health, liveness and metrics need no API
key (probes and scrapers carry none); the `/v1` routes do when keys are configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import AUTHENTICATION, INVALID_REQUEST, SERVER_ERROR, APIError, bad_request
from gateway.llm.adapters import AdapterNames
from gateway.llm.admission import Admission
from gateway.llm.chat_prompt import ChatPrompts
from gateway.llm.completion_render import DONE, Completion, error_event
from gateway.llm.completions import CHAT, GenerationRequest, parse_chat, parse_completion
from gateway.llm.triton import Generation, Piece, TritonGenerator
from gateway.metrics import GatewayMetrics
from gateway.schema import parse_json, parse_request, render_response
from gateway.settings import LLM_PRIORITIES, PRIORITIES, PRIORITY_HEADER, GatewaySettings
from gateway.sse import EventStream, wait_for_disconnect
from gateway.tokens import TokenCounter
from gateway.triton import TritonEmbedder

log = logging.getLogger("gateway")

ROUTES = ("/v1/embeddings", "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/health/live", "/metrics")
OPEN_ROUTES = ("/health", "/health/live", "/metrics")
# nginx's status for a client that closed the connection before the answer: what the
# metrics record for a generation cut short by its client.
CLIENT_CLOSED = 499


class ClientGone(Exception):
    """The client closed the connection; its generation was cancelled."""


def json_response(body: dict | bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return Response(content, status, headers, media_type="application/json")


class MetricsMiddleware:
    """Counts and times every answer (errors and 404s included) by route template."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            path = scope["path"]
            route = path if path in ROUTES else "/v1/models/{model}" if path.startswith("/v1/models/") else "other"
            self.metrics.observe(route, scope["method"], status, time.perf_counter() - start)


class Gateway:
    """The handlers and what they share; `app` is the ASGI application."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.metrics = GatewayMetrics()
        self.tokens = TokenCounter(settings.tokenizer_path)
        self.embedder: TritonEmbedder | None = None
        self.generator: TritonGenerator | None = None
        self.prompts = ChatPrompts(settings.llm_folder)
        self.adapters = AdapterNames(settings.llm_folder)
        self.admission = Admission(settings.llm_max_streams, settings.retry_after_s)
        self.metrics.open_generations.set_function(lambda: self.admission.open)
        self.created = int(time.time())
        self.app = Starlette(
            routes=[
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/models/{model:path}", self.model, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/health/live", self.live, methods=["GET"]),
                Route("/metrics", self.metrics_route, methods=["GET"]),
            ],
            exception_handlers={
                ClientGone: self.on_client_gone,
                APIError: self.on_api_error,
                HTTPException: self.on_http_error,
                Exception: self.on_unexpected,
            },
            lifespan=self.lifespan,
        )
        self.app.add_middleware(MetricsMiddleware, metrics=self.metrics)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.embedder = TritonEmbedder(self.settings.triton_url, self.settings.triton_model, self.settings.retry_after_s)
        if self.settings.llm_model:
            self.generator = TritonGenerator(self.settings.triton_url, self.settings.llm_model, self.settings.retry_after_s)
        log.info(
            "gateway for Triton model %r at %s, served as %r",
            self.settings.triton_model,
            self.settings.triton_url,
            self.settings.model_name,
        )
        try:
            yield
        finally:
            await self.embedder.close()
            if self.generator is not None:
                await self.generator.close()

    # ---- errors -------------------------------------------------------------------
    async def on_api_error(self, _request: Request, exc: APIError) -> Response:
        self.metrics.error(exc.status, exc.code)
        if exc.status >= 500:
            log.warning("%s", exc)
        return json_response(exc.body(), exc.status, exc.headers())

    async def on_client_gone(self, _request: Request, _exc: ClientGone) -> Response:
        self.metrics.error(CLIENT_CLOSED, "client_closed_request")
        return Response(status_code=CLIENT_CLOSED)

    async def on_http_error(self, request: Request, exc: HTTPException) -> Response:
        message = f"Unknown request URL: {request.method} {request.url.path}." if exc.status_code == 404 else str(exc.detail)
        code = "unknown_url" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None
        return await self.on_api_error(request, APIError(exc.status_code, message, INVALID_REQUEST, None, code))

    async def on_unexpected(self, request: Request, _exc: Exception) -> Response:
        """Starlette re-raises the exception after this answer, so the server logs its traceback."""
        return await self.on_api_error(
            request, APIError(500, "The server had an error processing your request.", SERVER_ERROR, None, "internal_error")
        )

    # ---- checks -------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if not self.settings.api_keys:
            return
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise APIError(
                401, "You didn't provide an API key; send 'Authorization: Bearer <key>'.", AUTHENTICATION, None, "missing_api_key"
            )
        key = key.strip().encode()
        if not any(hmac.compare_digest(key, known.encode()) for known in self.settings.api_keys):
            raise APIError(401, "Incorrect API key provided.", AUTHENTICATION, None, "invalid_api_key")

    async def read_body(self, request: Request) -> bytes:
        """The body, refused with 413 as soon as it passes the limit (declared or streamed)."""
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_long = APIError(413, f"The request body exceeds {limit} bytes.", INVALID_REQUEST, None, "request_too_large")
        if declared.isdigit() and int(declared) > limit:
            raise too_long
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise too_long
            parts.append(part)
        return b"".join(parts)

    def priority_class(self, request: Request) -> str:
        value = request.headers.get(PRIORITY_HEADER, "bulk").strip().lower()
        if value not in PRIORITIES:
            raise bad_request(f"Header '{PRIORITY_HEADER}' must be one of {', '.join(PRIORITIES)}, not {value!r}.", PRIORITY_HEADER)
        return value

    def priority(self, request: Request) -> int:
        return PRIORITIES[self.priority_class(request)]

    # ---- routes -------------------------------------------------------------------
    async def embeddings(self, request: Request) -> Response:
        self.authorize(request)
        priority = self.priority(request)
        body = parse_request(parse_json(await self.read_body(request)), self.settings.model_name, self.settings.max_inputs)
        info = await self.embedder.info()
        body.check_dimensions(info.dimensions)
        vectors = await self.embedder.embed(body.encoded, priority, self.settings.request_timeout_s)
        tokens = await self.tokens.count_async(body.texts)
        self.metrics.inputs.inc(len(body.texts))
        self.metrics.tokens.inc(tokens)
        self.metrics.triton_requests.inc(-(-len(body.texts) // info.max_batch_size))
        return json_response(render_response(body, vectors, tokens))

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, parse_completion)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, parse_chat)

    async def generate(self, request: Request, parse: Callable[[dict, Sequence[str]], GenerationRequest]) -> Response:
        """Both LLM routes: checked, sent to Triton, and not answered before the first piece came
        back (so the model's refusals keep their status: 400, 429, 503); from then on a stream."""
        self.authorize(request)
        if self.generator is None:
            raise APIError(404, "This gateway serves no LLM (started with --llm-model '').", INVALID_REQUEST, None, "unknown_url")
        priority = LLM_PRIORITIES[self.priority_class(request)]
        body = parse(parse_json(await self.read_body(request)), (self.settings.llm_name, *self.adapters.names()))
        prompt = self.prompts.render(body.messages) if body.kind == CHAT else body.prompt
        max_tokens = body.max_tokens
        if max_tokens is None:  # chat without a limit: what the context window leaves (vLLM's rule)
            max_tokens = max(1, (await self.generator.info()).max_model_len - self.prompts.count(prompt))
        sampling = body.sampling_parameters(priority, max_tokens)
        if body.model != self.settings.llm_name:
            sampling["lora_name"] = body.model  # one of the LLM's adapters (llm.adapters)
        slot = self.admission.admit()
        disconnected = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            first, generation = await self.until_disconnected(
                self.generator.generate(prompt, sampling, self.settings.llm_timeout_s), disconnected
            )
        except BaseException as exc:
            disconnected.cancel()
            slot.release()
            if isinstance(exc, APIError) and body.kind == CHAT and exc.param == "prompt":
                exc.param = "messages"  # the model names its input; this client sent messages
            raise
        completion = Completion(body)
        self.metrics.generations.labels(body.kind, "true" if body.stream else "false").inc()

        async def finish() -> None:
            await generation.close()
            slot.release()

        if body.stream:
            return EventStream(self.events(completion, first, generation), disconnected, finish)
        try:
            text, reason = await self.until_disconnected(self.collect(completion, first, generation), disconnected)
        finally:
            disconnected.cancel()
            await finish()
        return json_response(completion.body(text, reason))

    async def until_disconnected(self, work: Awaitable, disconnected: asyncio.Future):
        """`work`'s result, unless the client leaves first: then `work` is cancelled (and with
        it the Triton stream) and ClientGone raised."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task, disconnected}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.metrics.cancelled_generations.inc()
            raise ClientGone
        return task.result()

    def count(self, completion: Completion, piece: Piece) -> None:
        completion.count(piece.prompt_tokens, piece.completion_tokens)
        self.metrics.completion_tokens.inc(piece.completion_tokens)
        if piece.finish_reason is not None:
            self.metrics.prompt_tokens_llm.inc(completion.usage.prompt_tokens)

    async def collect(self, completion: Completion, first: Piece, generation: Generation) -> tuple[str, str | None]:
        texts, piece = [first.text], first
        self.count(completion, first)
        async for piece in generation:
            texts.append(piece.text)
            self.count(completion, piece)
        return "".join(texts), piece.finish_reason

    async def events(self, completion: Completion, first: Piece, generation: Generation) -> AsyncIterator[bytes]:
        """The SSE body. Leaving it early (the client went away) closes the generation, which
        cancels the Triton stream."""
        try:
            piece, opening = first, True
            while True:
                self.count(completion, piece)
                if piece.text or opening or piece.finish_reason is not None:
                    yield completion.chunk(piece.text, piece.finish_reason, first=opening)
                    opening = False
                if piece.finish_reason is not None:
                    break
                try:
                    piece = await anext(generation)
                except StopAsyncIteration:
                    break
                except APIError as error:  # the status line is gone: the error travels as an event
                    self.metrics.error(error.status, error.code)
                    yield error_event(error)
                    return
            if completion.request.include_usage:
                yield completion.usage_chunk()
            yield DONE
        finally:
            if not generation.finished:
                self.metrics.cancelled_generations.inc()
            await generation.close()

    def model_card(self, name: str | None = None) -> dict:
        card = {"id": name or self.settings.model_name, "object": "model", "created": self.created, "owned_by": "triton"}
        if name in self.adapters.names():
            card["parent"] = self.settings.llm_name  # a LoRA adapter of the LLM (vLLM's model card field)
        return card

    async def models(self, request: Request) -> Response:
        """The embedding model, and the LLM and its LoRA adapters when Triton serves it."""
        self.authorize(request)
        cards = [self.model_card()]
        if self.generator is not None and await self.generator.ready():
            cards += [self.model_card(name) for name in (self.settings.llm_name, *self.adapters.names())]
        return json_response({"object": "list", "data": cards})

    async def model(self, request: Request) -> Response:
        self.authorize(request)
        name = request.path_params["model"]
        llm_names = (self.settings.llm_name, *self.adapters.names())
        if name != self.settings.model_name and (self.generator is None or name not in llm_names):
            raise APIError(404, f"The model '{name}' does not exist.", INVALID_REQUEST, "model", "model_not_found")
        return json_response(self.model_card(name))

    async def health(self, _request: Request) -> Response:
        if not await self.embedder.ready():
            raise APIError(
                503,
                f"Triton's model '{self.settings.triton_model}' at {self.settings.triton_url} is not ready.",
                "service_unavailable",
                None,
                "triton_unavailable",
                self.settings.retry_after_s,
            )
        return json_response({"status": "ready", "model": self.settings.model_name})

    async def live(self, _request: Request) -> Response:
        return json_response({"status": "live"})

    async def metrics_route(self, _request: Request) -> Response:
        content, media_type = self.metrics.exposition()
        return Response(content, media_type=media_type)


def create_app(settings: GatewaySettings) -> Starlette:
    return Gateway(settings).app

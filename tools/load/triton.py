"""The engine's real Sender: tritonclient's asyncio clients (gRPC or HTTP).

Each request kind maps to a Target (a model and the factory of its inputs); one kind
per run is the common case, several (a soak's good and bad requests) work the same way.
"""

from __future__ import annotations

from dataclasses import replace

from tools.embed import client_module
from tools.load.driver import Prepared
from tools.load.mix import DEFAULT_KIND, Request
from tools.load.requests import Target


class TritonSender:
    """One aio client per run, made inside the run's event loop (the gRPC channel binds to it)."""

    def __init__(self, url: str, targets: Target | dict[str, Target], protocol: str = "grpc") -> None:
        self.url, self.protocol = url, protocol
        self.targets = targets if isinstance(targets, dict) else {DEFAULT_KIND: targets}
        self.module = client_module(protocol, aio=True)
        self.client = None

    async def open(self) -> None:
        kwargs = {"conn_limit": 4096} if self.protocol == "http" else {}
        self.client = self.module.InferenceServerClient(self.url, **kwargs)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None

    def prepare(self, request: Request) -> Prepared:
        target = self.targets.get(request.kind) or self.targets[DEFAULT_KIND]
        inputs = target.make_inputs(self.module, request.index)
        outputs = [self.module.InferRequestedOutput(name) for name in target.outputs]
        label, tokens = target.request_class(request.index) if target.request_class else ("", None)
        if target.priority is not None:
            request = replace(request, priority=target.priority)
        if target.timeout_us is not None:
            request = replace(request, timeout_us=target.timeout_us)
        return Prepared(request, target.model, (inputs, outputs), target.rows_per_request, tokens, label)

    async def send(self, prepared: Prepared) -> None:
        inputs, outputs = prepared.payload
        request = prepared.request
        await self.client.infer(prepared.model, inputs, outputs=outputs, priority=request.priority, timeout=request.timeout_us)

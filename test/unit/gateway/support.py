"""Test support for the gateway: cluster objects, a scriptable fake engine and a running gateway, all on loopback.

The fake engine is an aiohttp server on 127.0.0.1 whose answer each test picks (`FakeEngine.handler`). It
runs with handler cancellation, as the gateway does, so a request the gateway abandons shows up as a
cancelled handler (`FakeEngine.cancelled`). Where a test needs one step of the engine to wait for the client,
the engine waits on an asyncio.Event the test sets (`FakeEngine.release`); nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from llmaz.apis.routing import LEAST_OUTSTANDING
from llmaz.gateway.proxy.auth import ApiKeys, Authenticator
from llmaz.gateway.proxy.keys import compact_secret
from llmaz.gateway.proxy.limits import Limits
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway, GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals, LoadSignals
from llmaz.gateway.routing.picker import RoutingOptions
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.signals import EngineSignals
from llmaz.gateway.scaling.waker import Waker

# Re-exported: the gateway tests build their objects with these.
from llmaz_dev.testing.gateway_objects import NAMESPACE as NAMESPACE
from llmaz_dev.testing.gateway_objects import Obj as Obj
from llmaz_dev.testing.gateway_objects import endpoint_slice as endpoint_slice
from llmaz_dev.testing.gateway_objects import inference_service as inference_service
from llmaz_dev.testing.gateway_objects import lb_service as lb_service
from llmaz_dev.testing.gateway_objects import open_model as open_model
from llmaz_dev.testing.gateway_objects import playground as playground
from llmaz_dev.testing.informer import FakeInformer

EngineHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Bounds every wait in these tests; reached only when something is broken.
WAIT = 10.0
LEAST_OUTSTANDING_GATEWAY = GatewayOptions(routing=RoutingOptions(strategy=LEAST_OUTSTANDING))
"""For the tests of the proxy's own steps (retries, failures, streams) that steer a request's pick by the requests
in flight: least outstanding, where the default (prefix-aware) sends a prompt to its home."""
# What `/v1/models` says a model serves: on vLLM; on llama.cpp without flags; on an engine not known.
VLLM_CAPABILITIES = [
    *("chat", "completion", "embedding", "responses", "rerank", "score"),
    *("transcription", "translation", "tokenize", "detokenize"),
]
LLAMACPP_CAPABILITIES = ["chat", "completion", "responses", "tokenize", "detokenize"]
EVERY_CAPABILITY = [*VLLM_CAPABILITIES[:8], "speech", *VLLM_CAPABILITIES[8:]]


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


def chat_completion(model: str = "m", prompt_tokens: int = 3, completion_tokens: int = 5) -> Obj:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


FIRST_EVENT = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
LAST_EVENTS = (
    b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18}}\n\n'
    b"data: [DONE]\n\n"
)


@dataclass
class FakeEngine:
    """An engine endpoint on 127.0.0.1; `handler` decides each answer (default: a chat completion)."""

    requests: list[Seen] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    first_sent: asyncio.Event = field(default_factory=asyncio.Event)
    handler: EngineHandler | None = None
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port)

    async def start(self) -> FakeEngine:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Seen(request.method, request.path_qs, dict(request.headers), body))
        try:
            return await (self.handler or self.ok)(request)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def ok(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(chat_completion(orjson.loads(self.requests[-1].body).get("model", "m")))

    async def unavailable(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "overloaded"}}, status=503)

    async def hang(self, request: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """SSE: one event, then (after `release`) a usage chunk and [DONE]."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST_EVENT)
        self.first_sent.set()
        await self.release.wait()
        await resp.write(LAST_EVENTS)
        await resp.write_eof()
        return resp

    async def die_after_first_chunk(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST_EVENT)
        self.first_sent.set()
        await self.release.wait()
        assert request.transport is not None
        request.transport.abort()
        return resp


@contextlib.contextmanager
def refused_endpoint() -> Iterator[Endpoint]:
    """A loopback port that refuses connections: bound (so no one else gets it) but not listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield Endpoint("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


@dataclass
class Cluster:
    """The five informers the gateway reads, filled by the test."""

    playgrounds: FakeInformer = field(default_factory=FakeInformer)
    services: FakeInformer = field(default_factory=FakeInformer)
    open_models: FakeInformer = field(default_factory=FakeInformer)
    slices: FakeInformer = field(default_factory=FakeInformer)
    core_services: FakeInformer = field(default_factory=FakeInformer)

    def catalog(self) -> Catalog:
        return Catalog(self.playgrounds, self.services, self.open_models, [self.slices], self.core_services)

    def synced(self) -> Cluster:
        for informer in (self.playgrounds, self.services, self.open_models, self.slices, self.core_services):
            informer.mark_synced()
        return self

    def serve(self, model: str, *endpoints: Endpoint, name: str | None = None, backend: str | None = None) -> None:
        """An OpenModel and a Playground serving it (with the BackendRuntime `backend`, default the CRD's), with
        `endpoints` ready behind its `-lb` Service."""
        name = name or f"pg-{model}"
        self.open_models.add(open_model(model))
        served = playground(name, model)
        if backend is not None:
            served["spec"]["backendRuntimeConfig"] = {"backendName": backend}
        self.playgrounds.add(served)
        for i, e in enumerate(endpoints):
            self.slices.add(endpoint_slice(f"{name}-lb-{i}", f"{name}-lb", e.port, (e.address, True, False)))


@dataclass
class RunningGateway:
    gateway: Gateway
    url: str
    session: aiohttp.ClientSession

    @property
    def metrics(self) -> GatewayMetrics:
        return self.gateway.metrics

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def post(self, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.session.post(self.url + path, data=data, **kwargs) as resp:
            raw = await resp.read()
            return resp.status, orjson.loads(raw) if raw else None


@contextlib.asynccontextmanager
async def running_gateway(
    cluster: Cluster,
    options: GatewayOptions | None = None,
    *,
    api_keys: ApiKeys | Authenticator | None = None,
    limits: Limits | None = None,
    in_flight: InFlight | None = None,
    catalog: Catalog | None = None,
    waker: Waker | None = None,
    adapters: AdapterSignals | None = None,
    signals: LoadSignals | None = None,
) -> AsyncIterator[RunningGateway]:
    """A gateway on 127.0.0.1 over `cluster` (or `catalog`, one of its catalogs), stopped (drained) on exit;
    `signals`: the engines' load as the test says it (default: never known)."""
    opts = options or GatewayOptions()
    gateway = Gateway(
        catalog or cluster.catalog(),
        dataclasses.replace(opts, bind_address="127.0.0.1:0"),
        api_keys=api_keys,
        limits=limits,
        metrics=GatewayMetrics(process_collectors=False),
        in_flight=in_flight,
        waker=waker,
        signals=signals,
        adapters=adapters,
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(gateway.run(stopping))
    await asyncio.wait_for(gateway.wait_serving(), WAIT)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT))
    try:
        yield RunningGateway(gateway, f"http://127.0.0.1:{gateway.port}", session)
    finally:
        await session.close()
        stopping.set()
        await asyncio.wait_for(task, WAIT + opts.drain_timeout)


@contextlib.asynccontextmanager
async def engines(count: int = 1) -> AsyncIterator[list[FakeEngine]]:
    started = [await FakeEngine().start() for _ in range(count)]
    try:
        yield started
    finally:
        for engine in started:
            engine.release.set()
            await engine.stop()


@contextlib.asynccontextmanager
async def scraping(cluster: Cluster, **options: Any) -> AsyncIterator[EngineSignals]:
    """Engine signals over one of `cluster`'s catalogs (`signals.catalog`), closed on exit. Scrapes get `WAIT` unless
    a test sets `timeout`: on a loaded machine a loopback answer can take longer than the default's fraction of a
    second, and a listing that fails makes every endpoint a holder of every adapter."""
    options.setdefault("timeout", WAIT)
    signals = EngineSignals(cluster.catalog(), registry=CollectorRegistry(), **options)
    try:
        yield signals
    finally:
        await signals.close()


API_KEYS_NAMESPACE = "llmaz-system"


def secret(name: str, **data: str) -> Obj:
    """A labelled Secret as the informer keeps it (compacted: the key replaced by its digest)."""
    encoded = {k.replace("_", "-"): base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return compact_secret(
        {
            "metadata": {"name": name, "namespace": API_KEYS_NAMESPACE, "labels": {"llmaz.io/api-key": "true"}},
            "data": encoded,
        }
    )

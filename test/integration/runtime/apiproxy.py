"""A loopback HTTP proxy in front of the test API server that a test can make slow, throttling or watch-closing.

The client under test talks plain HTTP to 127.0.0.1 without credentials; the proxy forwards each request over TLS
with the kubeconfig's identity and streams the answer back (watches included). Per request, in this order:
- `throttle(request)` true: answered 429 TooManyRequests with `Retry-After: retry_after`, not forwarded;
- `close_watches`: a watch is answered 200 with an empty body at once, as a server that ends watches instantly;
- `delay(request)` seconds (default 0) pass before forwarding; a request whose client gave up meanwhile is dropped,
  so a timed-out write never lands late.
Every request is recorded as `Exchange` (method, path, status, when it was answered).

Limits: one upstream identity for every caller; only Content-Type and Accept are forwarded; no upgrades (exec,
port-forward); loopback only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from llmaz.runtime.client import RestConfig
from llmaz.runtime.client.config import from_kubeconfig


@dataclass(frozen=True, slots=True)
class Exchange:
    method: str
    path: str
    query: str
    status: int
    at: float  # time.monotonic() when the answer was sent


def is_lease(request: web.Request) -> bool:
    return "/leases" in request.path


def is_watch(request: web.Request) -> bool:
    return request.query.get("watch") in ("true", "1")


class ApiProxy:
    def __init__(self, upstream: RestConfig) -> None:
        self._upstream = upstream
        self.throttle: Callable[[web.Request], bool] = lambda request: False
        self.retry_after = 1
        self.delay: Callable[[web.Request], float] = lambda request: 0.0
        self.close_watches = False
        self.exchanges: list[Exchange] = []
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    @classmethod
    async def start(cls, kubeconfig: Path) -> ApiProxy:
        proxy = cls(await from_kubeconfig(kubeconfig))
        proxy._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=proxy._upstream.ssl_context()))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", proxy._handle)
        proxy._runner = web.AppRunner(app, handle_signals=False)
        await proxy._runner.setup()
        site = web.TCPSite(proxy._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        proxy.url = f"http://127.0.0.1:{port}"
        return proxy

    def rest_config(self, **options: object) -> RestConfig:
        """A client configuration that goes through this proxy."""
        config = RestConfig(host=self.url)
        for key, value in options.items():
            setattr(config, key, value)
        return config

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def answered(self, predicate: Callable[[Exchange], bool]) -> list[Exchange]:
        return [exchange for exchange in self.exchanges if predicate(exchange)]

    def _record(self, request: web.Request, status: int) -> None:
        self.exchanges.append(Exchange(request.method, request.path, request.query_string, status, time.monotonic()))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.throttle(request):
            self._record(request, 429)
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "TooManyRequests",
                "code": 429,
                "message": "throttled by the test proxy",
                "details": {"retryAfterSeconds": self.retry_after},
            }
            return web.Response(status=429, body=orjson.dumps(status), headers={"Retry-After": str(self.retry_after)})
        if self.close_watches and is_watch(request):
            self._record(request, 200)
            return web.Response(status=200, content_type="application/json")
        delay = self.delay(request)
        if delay > 0:
            await asyncio.sleep(delay)  # the slowness being simulated
            if request.transport is None or request.transport.is_closing():
                raise web.HTTPServiceUnavailable()  # the client gave up: nothing may reach the server late
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {name: request.headers[name] for name in ("Content-Type", "Accept") if name in request.headers}
        headers.update(await self._upstream.auth_headers())
        body = await request.read()
        async with self._session.request(
            request.method,
            self._upstream.host + request.path_qs,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
            server_hostname=self._upstream.tls_server_name,
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            self._record(request, upstream.status)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

"""The metrics endpoint: `/metrics` from the shared registry, over HTTPS with delegated auth, or plain HTTP.

Secure mode (the default, as deployed on :8443): TLS with the key pair in `cert_dir` (`tls.crt`, `tls.key`,
reloaded when they change), and every request must carry a bearer token the API server authenticates
(TokenReview) for a user allowed to `get` the path (SubjectAccessReview), e.g. through the `metrics-reader`
ClusterRole. Answers: 401 without a valid token, 403 without the permission, 500 when the API server cannot
be asked. Insecure mode (`--metrics-secure=false`, local runs) serves plain HTTP without auth.

The bind address takes an IPv6 host in brackets (`[::1]:8443`); an empty host or `[::]` listens on every
interface, IPv4 and IPv6. A connection must finish its TLS handshake, and each request its head, within
`read_timeout` (default `READ_TIMEOUT`); an idle keep-alive connection is closed after as long. Connections are
bounded (`MAX_CONNECTIONS`, `MAX_SERVED`, see `llmaz.runtime.server.listener`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from llmaz.runtime.client import ApiError
from llmaz.runtime.log import get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.rbac import allow_urls
from llmaz.runtime.runnable import until_cancelled
from llmaz.runtime.server.address import join_host_port, split_host_port
from llmaz.runtime.server.authn import DelegatingAuth
from llmaz.runtime.server.listener import ConnectionLimits, Connections, serving
from llmaz.runtime.webhook.certwatcher import CertWatcher

DEFAULT_CERT_DIR = Path("/tmp/k8s-metrics-server/serving-certs")
# Not the manager's permission: what a scraper (e.g. Prometheus' ServiceAccount) needs to read /metrics.
SCRAPER_RBAC_RULES = (allow_urls("/metrics", verbs=("get",)),)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
READ_TIMEOUT = 10.0
# Scrapers keep one connection each; a few dozen is plenty, and bounds what TLS buffers can take.
MAX_CONNECTIONS, MAX_SERVED = 256, 32


class MetricsServer:
    needs_leader_election = False

    def __init__(
        self,
        bind_address: str = ":8443",
        *,
        auth: DelegatingAuth | None = None,
        cert_dir: Path = DEFAULT_CERT_DIR,
        secure: bool = True,
        registry: CollectorRegistry = REGISTRY,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        if secure and auth is None:
            raise ValueError("secure metrics serving needs a DelegatingAuth")
        self.bind_address = bind_address
        self.read_timeout = read_timeout
        self._host, self._port = split_host_port(bind_address)
        self.secure = secure
        self.auth = auth
        self.registry = registry
        self.certs = CertWatcher(cert_dir / "tls.crt", cert_dir / "tls.key")
        self.port: int | None = None
        self._serving = asyncio.Event()
        self._connections = Connections()
        self._log = get_logger("llmaz.runtime.metrics")

    def started(self) -> bool:
        return self._serving.is_set()

    async def wait_started(self) -> None:
        await self._serving.wait()

    def app(self) -> web.Application:
        guard = [self._guard] if self.secure else []
        app = web.Application(middlewares=[self._connections.middleware, *guard])
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _metrics(self, _: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        assert self.auth is not None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        try:
            user = await self.auth.authenticate(token.strip()) if scheme.lower() == "bearer" and token else None
            if user is None:
                return web.Response(status=401, text="Unauthorized\n")
            if not await self.auth.authorize(user, request.method.lower(), request.path):
                return web.Response(status=403, text="Forbidden\n")
        except ApiError as exc:
            self._log.error("metrics authorization failed", error=repr(exc))
            return web.Response(status=500, text="Internal Server Error\n")
        return await handler(request)

    async def run(self) -> None:
        if self.secure:
            await self.certs.wait_loaded()
        ssl_context = self.certs.server_context() if self.secure else None
        limits = ConnectionLimits(MAX_CONNECTIONS, MAX_SERVED, first_message_timeout=self.read_timeout)
        try:
            async with serving(
                self.app(), self._host, self._port, self._connections, ssl_context=ssl_context, limits=limits,
                keepalive_timeout=self.read_timeout,
            ) as self.port:  # fmt: skip
                self._serving.set()
                address = join_host_port(self._host, self.port)
                self._log.info("metrics server started", address=address, secure=self.secure)
                await (self.certs.watch() if self.secure else until_cancelled())
        finally:
            self._serving.clear()

"""The EPP's gRPC server: Envoy's external processing service and gRPC health, plain text on one port.

Health services (`grpc.health.v1`): `liveness` SERVING while the server runs; `readiness` and
`envoy.service.ext_proc.v3.ExternalProcessor` SERVING once the catalog has synced; all NOT_SERVING when it stops.
On stop the server takes no new stream and gives the streams in flight (each one HTTP exchange) `drain_timeout`
seconds. Transport security (TLS) is not supported yet.

Each stream is served by its own task, so a conversation waiting for its request's endpoint (a held request) holds
only its own stream; the gateway cancelling the stream cancels the wait, and the request stops counting.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from llmaz.gateway.epp.processor import DEFAULT_MAX_BODY_BYTES, Conversation, RefusalError, Serving
from llmaz.gateway.proxy.auth import Authenticator
from llmaz.gateway.proxy.limits import DEFAULT_MAX_TOKENS_RESERVATION, Limits
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals
from llmaz.gateway.routing.picker import Pickers
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime.log import get_logger

DEFAULT_PORT: Final = 9002
EXT_PROC_SERVICE: Final = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS: Final = "liveness"
READINESS: Final = "readiness"
# How often readiness looks at the catalog until it has synced.
SYNC_POLL_SECONDS: Final = 0.1
_LOGGED_STACK_CHARS = 2000
# Room in one gRPC message beside the largest body: the headers and metadata Envoy sends with it.
MESSAGE_OVERHEAD_BYTES: Final = 1024 * 1024

_LOG = get_logger("llmaz.gateway.epp")


@dataclass(frozen=True, slots=True)
class EppOptions:
    host: str = ""
    """The address to listen on; empty: every address."""
    port: int = DEFAULT_PORT
    """0: any free port (the tests')."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    drain_timeout: float = 30.0
    fallbacks: int = 0
    """How many fallbacks follow the pick, for a gateway whose load balancer takes a list (Envoy's ORIGINAL_DST
    takes one address)."""
    max_tokens_cap: int | None = None
    """The most tokens a request may ask to generate (the proxy's `max_tokens_cap`); None: no cap."""
    default_max_tokens_reservation: int = DEFAULT_MAX_TOKENS_RESERVATION
    """Tokens a key's tokens-per-minute reserves for a request that does not say (the proxy's)."""
    hold_timeout: float = 30.0
    """Seconds a request is held while its model's replicas start (the proxy's `hold_timeout`)."""
    wake_timeout: float = 300.0
    """Seconds a request is held while its model scales up from zero (the proxy's `wake_timeout`)."""


def _internal_error() -> ext.ProcessingResponse:
    return RefusalError(
        500, "The endpoint picker failed to handle the request.", "internal_error", type="server_error"
    ).response()


class Processor(ext_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The ext_proc service: one `Conversation` per stream."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    async def Process(  # noqa: N802 (the gRPC method's name)
        self,
        request_iterator: AsyncIterator[ext.ProcessingRequest],
        context: grpc.aio.ServicerContext[ext.ProcessingRequest, ext.ProcessingResponse],
    ) -> None:
        conversation = Conversation(self.serving)
        try:
            async for message in request_iterator:
                try:
                    answers, over = await conversation.handle(message)
                except Exception as exc:
                    # A fault of the picker's own: this request is answered 500, the server goes on serving.
                    _LOG.error(
                        "processing failed",
                        error=type(exc).__name__,
                        stack="".join(traceback.format_tb(exc.__traceback__))[-_LOGGED_STACK_CHARS:],
                    )
                    answers, over = [_internal_error()], True
                for answer in answers:
                    await context.write(answer)
                if over:
                    return
            # The gateway closed its side mid-request: it is told why, if it still reads.
            ending = conversation.ended()
            if ending is not None and not context.done():
                await context.write(ending)
        finally:
            # The stream closed, however: the request ended (with response processing off, this is how it shows).
            conversation.finish()


class EndpointPicker:
    """A Runnable serving the EPP beside the proxy, on the same catalog and schedulers (no leader election)."""

    needs_leader_election = False

    def __init__(
        self,
        catalog: Catalog,
        pickers: Pickers,
        options: EppOptions | None = None,
        *,
        in_flight: InFlight | None = None,
        waker: Waker | None = None,
        api_keys: Authenticator | None = None,
        limits: Limits | None = None,
        metrics: GatewayMetrics | None = None,
        recognised: AdapterSignals | None = None,
    ) -> None:
        """Beside the proxy, each of `in_flight`, `waker`, `api_keys`, `limits` and `metrics` is the proxy's own, so a
        request counts, wakes, is authenticated and spends its key's budget the same way through either. `in_flight`
        defaults to the schedulers' count; without a `waker`, one that never scales; without `api_keys`, requests
        are not authenticated; without `limits`, keys' limits are not applied. `recognised`: the engine at each
        endpoint, as its metrics show it (the engine signals)."""
        self.catalog = catalog
        self.options = opts = options or EppOptions()
        serving = Serving(
            catalog,
            pickers,
            in_flight,
            waker,
            api_keys,
            metrics,
            limits=limits,
            max_tokens_cap=opts.max_tokens_cap,
            default_max_tokens_reservation=opts.default_max_tokens_reservation,
            max_body_bytes=opts.max_body_bytes,
            fallbacks=opts.fallbacks,
            hold_timeout=opts.hold_timeout,
            wake_timeout=opts.wake_timeout,
            recognised=recognised,
        )
        self.processor = Processor(serving)
        self.health = health.aio.HealthServicer()
        self.port: int | None = None
        self._ready = asyncio.Event()
        self._started = asyncio.Event()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def run(self, stopping: asyncio.Event) -> None:
        # A BUFFERED body comes in one message: gRPC's default bound (4 MiB) would refuse it before the EPP's own.
        limit = self.options.max_body_bytes + MESSAGE_OVERHEAD_BYTES
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
        ext_grpc.add_ExternalProcessorServicer_to_server(self.processor, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        host = self.options.host
        address = f"[{host}]:{self.options.port}" if ":" in host else f"{host or '[::]'}:{self.options.port}"
        self.port = server.add_insecure_port(address)
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        for service in (READINESS, EXT_PROC_SERVICE):
            await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        self._started.set()
        _LOG.info("endpoint picker serving", port=self.port)
        try:
            if await self._synced(stopping):
                for service in (READINESS, EXT_PROC_SERVICE):
                    await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
                self._ready.set()
                await stopping.wait()
        finally:
            self._ready.clear()
            await self.health.enter_graceful_shutdown()
            await server.stop(self.options.drain_timeout)
            _LOG.info("endpoint picker stopped")

    async def _synced(self, stopping: asyncio.Event) -> bool:
        """Wait until the catalog has synced; False when stopped first."""
        while not self.catalog.has_synced():
            try:
                await asyncio.wait_for(stopping.wait(), SYNC_POLL_SECONDS)
                return False
            except TimeoutError:
                continue
        return True

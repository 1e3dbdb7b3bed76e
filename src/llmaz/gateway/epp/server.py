"""The EPP's gRPC server: Envoy's external processing service and gRPC health, plain text on one port.

It serves on the picker's own transport (`http2`: gRPC over cleartext HTTP/2 on the event loop, a fraction of
grpcio's server CPU per request). Health services (`grpc.health.v1`, `health`): `liveness` SERVING while the server
runs; `readiness` and `envoy.service.ext_proc.v3.ExternalProcessor` SERVING once the catalog has synced; all
NOT_SERVING when it stops. On stop the server takes no new connection or stream (GOAWAY) and gives the streams in
flight (each one HTTP exchange) `drain_timeout` seconds. Transport security (TLS) is not supported yet.

Each stream's messages are handled in order by a task of its own while it has any, so a conversation waiting for
its request's endpoint (a held request) holds only its own stream; the gateway cancelling the stream cancels the
wait, and the request stops counting.
"""

from __future__ import annotations

import asyncio
import collections
import traceback
from dataclasses import dataclass
from typing import Final

from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from google.protobuf.message import DecodeError

from llmaz.gateway.epp.health import NOT_SERVING, SERVING, Health
from llmaz.gateway.epp.http2 import Call, Http2Server
from llmaz.gateway.epp.processor import (
    DEFAULT_MAX_BODY_BYTES,
    Conversation,
    RefusalError,
    Serving,
    bad_message,
)
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
PROCESS_METHOD: Final = f"/{EXT_PROC_SERVICE}/Process"
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


class ProcessCall:
    """One ext_proc stream: its messages, in order, to its `Conversation`; its answers back on the call."""

    def __init__(self, serving: Serving, call: Call) -> None:
        self.call = call
        self.conversation = Conversation(serving)
        self.inbox: collections.deque[bytes | None] = collections.deque()
        """The stream's messages not handled yet; None: the gateway's side has ended."""
        self.worker: asyncio.Task[None] | None = None

    def on_message(self, message: bytes) -> None:
        self.inbox.append(message)
        self._work()

    def on_half_close(self) -> None:
        self.inbox.append(None)
        self._work()

    def on_cancel(self) -> None:
        # Finished here, not by the worker's own end: a worker cancelled before its first step never runs (Envoy's
        # last DATA and its reset come in one read, so the worker the end queued has not started yet).
        self.inbox.clear()
        self.conversation.finish()
        if self.worker is not None:
            self.worker.cancel()

    def _work(self) -> None:
        if self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self.inbox:
                data = self.inbox.popleft()
                if data is None:
                    # The gateway closed its side: told why if mid-request; with response processing off, this
                    # end (or a reset) is how the request's end shows.
                    ending = self.conversation.ended()
                    if ending is not None:
                        self.call.send(ending.SerializeToString())
                    self._end()
                    return
                answers, over = await self._answers(data)
                for answer in answers:
                    self.call.send(answer.SerializeToString())
                if over:
                    self._end()
                    return
        except asyncio.CancelledError:
            self.conversation.finish()
            raise
        finally:
            self.worker = None

    async def _answers(self, data: bytes) -> tuple[list[ext.ProcessingResponse], bool]:
        try:
            message = ext.ProcessingRequest.FromString(data)
        except DecodeError:
            return [bad_message("a message that is not an ext_proc ProcessingRequest").response()], True
        try:
            return await self.conversation.handle(message)
        except Exception as exc:
            # A fault of the picker's own: this request is answered 500, the server goes on serving.
            _LOG.error(
                "processing failed",
                error=type(exc).__name__,
                stack="".join(traceback.format_tb(exc.__traceback__))[-_LOGGED_STACK_CHARS:],
            )
            return [_internal_error()], True

    def _end(self) -> None:
        self.inbox.clear()
        self.call.finish()
        self.conversation.finish()


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
        self.serving = serving
        self.health = Health()
        self.port: int | None = None
        self._ready = asyncio.Event()
        self._started = asyncio.Event()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def run(self, stopping: asyncio.Event) -> None:
        # A BUFFERED body comes in one message: the bound is the EPP's own, with room for what comes beside it.
        limit = self.options.max_body_bytes + MESSAGE_OVERHEAD_BYTES
        methods = {PROCESS_METHOD: lambda call: ProcessCall(self.serving, call), **self.health.methods()}
        server = Http2Server(methods, max_message_bytes=limit)
        self.health.set(LIVENESS, SERVING)
        for service in (READINESS, EXT_PROC_SERVICE):
            self.health.set(service, NOT_SERVING)
        self.port = await server.start(self.options.host, self.options.port)
        self._started.set()
        _LOG.info("endpoint picker serving", port=self.port)
        try:
            if await self._synced(stopping):
                for service in (READINESS, EXT_PROC_SERVICE):
                    self.health.set(service, SERVING)
                self._ready.set()
                await stopping.wait()
        finally:
            self._ready.clear()
            self.health.enter_graceful_shutdown()
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

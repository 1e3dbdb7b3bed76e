"""The gateway's HTTP server: OpenAI's `/v1` API in front of every model llmaz serves.

Routes: `GET /v1/models` and `GET /v1/models/{id}`; `POST` on every path of `engines.API_PATHS` (chat, completions,
embeddings, responses, rerank, score, audio, tokenize and detokenize), routed by model (see `body` and
`llmaz.gateway.routing`). A request for an endpoint its model's engine does not serve (`Catalog.capabilities`, from
the engine table and the Playground's args) is answered 501 `unsupported_endpoint` at once, before anything is
woken or contacted; a path the engine serves elsewhere is sent there (`engines.Engine.path_of`).

Probes and metrics are served on their own ports (see `__main__`). The same application, middleware and all, also
listens on the activator address when one is set: that is where the `-lb` activator's slices send direct clients of a
sleeping Playground (`activator`), so they are authenticated, routed, woken, counted and drained exactly like the
gateway's own clients.

Invariants:
- Every answer the gateway makes itself is an OpenAI error object (`errors`), whatever went wrong: a bad
  request, an unknown path or method, a failure of the gateway itself (500, logged). Only cancellation escapes.
- Authentication (when API keys are configured) comes first: nothing about models is revealed without a key.
- Until the caches have synced, requests are refused with 503 rather than answered from an empty view.
- Connections are taken through the project's listener (`llmaz.runtime.server.listener`): at most `max_connections`
  are held at once (beyond that the kernel's backlog holds them), and a connection is handed to the HTTP server
  only once its first request head has arrived. An empty host binds every interface, IPv4 and IPv6 (`:8000`);
  `0.0.0.0` is IPv4 only, `[::1]` IPv6 loopback only.
- Slow clients are bounded: the first request line and headers must arrive within `header_timeout` of the
  connection opening, later ones within `header_timeout` of the previous response (aiohttp's keep-alive timer,
  which is also the idle timeout), the body within `body_timeout` (408); header sizes are capped by aiohttp
  (8 KiB lines and fields, 128 headers), the body by `max_body_bytes` (413). A refused body is drained for at
  most LINGER_SECONDS.
- Requests that are not HTTP (a malformed request line, header or chunked framing) are refused by aiohttp's
  parser before they reach the API: a plain-text 400 and a closed connection, never a 5xx.
- Every request is counted once in `llmaz_gateway_requests_total` with the status the client got (499 if it
  went away first), under the name it was served by (an adapter's own name), and is in flight (`InFlight`: the
  per-model gauge, idle detection) for its base model from routing to its end.
- A request naming a LoRA adapter (`routing.adapters`) is routed to its base model's endpoints that hold the
  adapter, as the engines list them (`AdapterSignals`; every endpoint when an engine's listing is not known).
  When the model has ready endpoints but none holds it (a rollout adding the adapter), the request is held up to
  `hold_timeout` for one that does (503 `model_not_ready`). An adapter that every inference Service of its model
  left out (it failed for good: `status.unavailableAdapters`) is answered 503 `model_not_ready` at once, with
  why. Every request for a model with adapters, the base model's too, has each attempt's body made for its
  endpoint's engine (llama.cpp is sent every adapter's scale).
- A routed model with no ready endpoint: scaling says whether one is coming (`Waker.wake`, which scales a sleeping
  model up), and when one is the request waits on routing for it (`Catalog.await_endpoints`): up to
  `wake_timeout` for a model scaling up from zero (504), up to `hold_timeout` for replicas starting (503
  `model_not_ready`); when none is coming (no Playground, no replica, or replicas that cannot become ready) it is
  answered 503 `model_not_ready` at once.
  Under flow control it waits meanwhile in the model's flow queue (its band, its tenant) instead, bounded by the
  longer of that bound and the queue's TTL, and leaves it in the queue's order once endpoints come; a request
  whose endpoint does not come in time is answered as without flow control.
- Flow control (`llmaz.gateway.flow`, unless off): once it has endpoints, a request for a saturated model waits in
  the model's queue, higher bands first, then fairly between tenants, and is routed when its turn comes (on the
  endpoints the model has then); past the queue's size or TTL it is answered 429 (503 when the model has no
  endpoint left). A model that is not saturated is never held. The band is the `x-llmaz-priority` header's (400
  `invalid_priority` when it is not an integer from 0 to 9, checked before the key's limits), at most the key's
  `priority`.
- A client is told only the model's name and a reason class (`errors.Unready`); why, in the cluster's words (other
  namespaces' Playgrounds, their conditions, the API server's refusals), is in the request's log line (`detail`).
- No request header value is logged: a failure of the gateway itself is logged as its type, a message cut of the
  request's credentials (`forwarding.sanitised_error`) and its stack without any exception's text.
- Graceful stop: once `stopping` is set, readiness fails and nothing new is accepted; the connections drain
  (`Connections.drain`: each answer closes its connection, quiet keep-alive connections are closed) while
  requests already in flight (streams included) finish, for at most `drain_timeout`; then whatever is left gets
  CANCEL_SECONDS more and is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import hdrs, web
from opentelemetry import trace

from llmaz.gateway.flow.control import NO_ENDPOINT, QUEUE_FULL, FlowControl, FlowOptions, ShedError, Ticket
from llmaz.gateway.flow.priority import PRIORITY_HEADER, PriorityError, band_of
from llmaz.gateway.flow.saturation import Saturation
from llmaz.gateway.proxy import body, errors
from llmaz.gateway.proxy.auth import ApiKeys, Authenticator, Caller
from llmaz.gateway.proxy.forwarding import Exchange, Proxy, ProxyOptions, sanitised_error
from llmaz.gateway.proxy.limits import (
    DEFAULT_MAX_TOKENS_RESERVATION,
    UNLIMITED,
    Admission,
    LimitReachedError,
    Limits,
    max_tokens_of,
    reservation_of,
)
from llmaz.gateway.proxy.metrics import CLIENT_CLOSED, GatewayMetrics
from llmaz.gateway.routing import engines
from llmaz.gateway.routing.adapters import Adapter, engine_body, loaded
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals, LoadSignals, NoSignals
from llmaz.gateway.routing.picker import Pickers, RoutingOptions
from llmaz.gateway.routing.prefix import SESSION_HEADER, routing_key, session_of
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import Request
from llmaz.gateway.scaling.outlook import Coming
from llmaz.gateway.scaling.waker import NotComingError, ScaleUpError, WakeNotAllowedError, Waker
from llmaz.runtime import tracing
from llmaz.runtime.log import get_logger
from llmaz.runtime.server.address import split_host_port
from llmaz.runtime.server.listener import HTTP_LOG, ConnectionLimits, Connections, start_site, stop_accepting

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The middleware's record of the request being handled, for the handler (both run in the request's task).
_EXCHANGE: contextvars.ContextVar[Exchange] = contextvars.ContextVar("llmaz_gateway_exchange")
# Who sent the request being handled (None without API keys), set by the middleware.
_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("llmaz_gateway_caller", default=None)
# How much of an unknown path a log line keeps.
_LOGGED_PATH_CHARS = 200
# How much of a failure's stack a log line keeps (its last frames).
_LOGGED_STACK_CHARS = 4096
# After refusing a request whose body was not read (413, 408, 401), how long the rest of the body is read and
# dropped before the connection closes: long enough for a client still sending to reach its read and see the
# answer (closing on unread data resets the connection, which can discard the answer), short enough that a
# hostile client gains nothing (aiohttp's default is 10 s).
LINGER_SECONDS = 2.0
# After the drain, how long what is left gets to be cancelled and unwind.
CANCEL_SECONDS = 1.0
DEFAULT_MAX_CONNECTIONS = 4096
TRACER = "llmaz.gateway"


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    bind_address: str = ":8000"
    """Where the API listens. Default ":8000"."""
    max_body_bytes: int = body.DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted (413 above). Default 10 MiB."""
    header_timeout: float = 30.0
    """Seconds for a request's line and headers to arrive; also the idle keep-alive timeout. Default 30."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Client connections held at once, per listening address (streams in progress included). Default 4096."""
    body_timeout: float = 60.0
    """Seconds for a request's whole body to arrive (408 after). Default 60."""
    drain_timeout: float = 30.0
    """Seconds in-flight requests may take to finish once the gateway is stopping. Default 30."""
    wake_timeout: float = 300.0
    """Seconds a request is held while its model scales up from zero (504 after). Default 300."""
    hold_timeout: float = 30.0
    """Seconds a request is held while its model's replicas start (a restart, a rollout, a scale-up; 503 after).
    Default 30."""
    max_tokens_cap: int | None = None
    """The most tokens a request may ask to generate (`max_tokens`, `max_completion_tokens`, `max_output_tokens`);
    a request asking more is refused (400 naming the field). Default: no cap."""
    default_max_tokens_reservation: int = DEFAULT_MAX_TOKENS_RESERVATION
    """Tokens reserved against a key's tokens-per-minute for a request that does not say how many it may generate.
    Default 1024."""
    activator_address: str | None = None
    """A second address serving the same API, for the `-lb` activator's slices. Default: none."""
    proxy: ProxyOptions = field(default_factory=ProxyOptions)
    """How engines are called (timeouts, retries)."""
    routing: RoutingOptions = field(default_factory=RoutingOptions)
    """How an endpoint is picked (strategy, weights, load factor); a Playground's annotations may override it."""
    flow: FlowOptions = field(default_factory=FlowOptions)
    """Flow control: when a model is saturated, and its queue's size and TTL."""


class Gateway:
    """A Runnable serving the API (it needs no leader election: every replica serves)."""

    needs_leader_election = False

    def __init__(
        self,
        catalog: Catalog,
        options: GatewayOptions | None = None,
        *,
        api_keys: ApiKeys | Authenticator | None = None,
        limits: Limits | None = None,
        metrics: GatewayMetrics | None = None,
        in_flight: InFlight | None = None,
        waker: Waker | None = None,
        signals: LoadSignals | None = None,
        adapters: AdapterSignals | None = None,
    ) -> None:
        """`in_flight` is the replica's one count of requests in flight (shared with idle detection); without a
        `waker`, one that never scales (scale to zero off); without `signals`, the engines' load is never known
        and routing uses the in-flight counts alone; without `adapters`, no engine's adapter listing is known and
        every endpoint of a model is taken to hold its adapters."""
        self.catalog = catalog
        self.signals: LoadSignals = NoSignals() if signals is None else signals
        self.adapters: AdapterSignals = NoSignals() if adapters is None else adapters
        self.waker = waker or Waker(catalog, None)
        self.options = opts = options or GatewayOptions()
        self.api_keys = Authenticator(api_keys) if isinstance(api_keys, ApiKeys) else api_keys
        self.limits = limits or Limits(time.monotonic)
        self.metrics = metrics or GatewayMetrics()
        self.in_flight = in_flight or InFlight()
        self.in_flight.watch(self.metrics.in_flight_changed)
        proxy_options = opts.proxy
        if api_keys is not None:
            proxy_options = dataclasses.replace(proxy_options, forward_authorization=False)
        self.pickers = Pickers(
            self.in_flight,
            self.signals,
            opts.routing,
            adapters=self.adapters,
            corrected=self.metrics.prefix_index_corrected,
            held=self.metrics.prefix_held,
        )
        self.flow: FlowControl | None = None
        """Flow control (`llmaz.gateway.flow`), None when off; `refresh` it when new engine signals arrive."""
        if opts.flow.enabled:
            saturation = Saturation(self.in_flight, self.signals, opts.flow.saturation)
            self.flow = FlowControl(catalog.endpoints, saturation, opts.flow, self.metrics)
        self.tracer = tracing.tracer(TRACER)
        """Spans of each request (see `tracing`); the no-op tracer while tracing is off."""
        self._tracing = tracing.enabled()
        self.proxy = Proxy(self.metrics, proxy_options, self.tracer if self._tracing else None)
        self.port: int | None = None
        self.activator_port: int | None = None
        self._serving = asyncio.Event()
        self._connections = Connections()
        self._runner: web.AppRunner | None = None
        self._log = get_logger("llmaz.gateway")

    def serving(self) -> bool:
        """Readiness: listening, and not stopping."""
        return self._serving.is_set()

    async def wait_serving(self) -> None:
        await self._serving.wait()

    def held_connections(self) -> int:
        """Client connections the listeners hold now, on every address (for tests and debugging)."""
        sites = self._runner.sites if self._runner is not None else set()
        return sum(getattr(site, "held", 0) for site in sites)

    def app(self) -> web.Application:
        middlewares = [self._connections.middleware, self._observe]
        app = web.Application(middlewares=middlewares, client_max_size=self.options.max_body_bytes + 1)
        app.router.add_get("/v1/models", self._models, allow_head=False)
        app.router.add_get("/v1/models/{model:.+}", self._model, allow_head=False)
        for path, capability in engines.API_PATHS.items():
            app.router.add_post(path, functools.partial(self._inference, capability))
        return app

    async def run(self, stopping: asyncio.Event) -> None:
        await self.proxy.start()
        opts = self.options
        runner = self._runner = web.AppRunner(
            self.app(),
            access_log=None,
            handler_cancellation=True,  # a client that disconnects cancels its request, and so its engine request
            keepalive_timeout=opts.header_timeout,
            shutdown_timeout=CANCEL_SECONDS,
            lingering_time=LINGER_SECONDS,
            logger=HTTP_LOG,
        )
        limits = ConnectionLimits(opts.max_connections, opts.max_connections, opts.header_timeout)
        try:
            await runner.setup()
            self.port = await start_site(
                runner, *split_host_port(opts.bind_address), limits=limits, connections=self._connections
            )
            if opts.activator_address:
                self.activator_port = await start_site(
                    runner, *split_host_port(opts.activator_address), limits=limits, connections=self._connections
                )
            self._serving.set()
            self._log.info(
                "gateway serving",
                port=self.port,
                activator_port=self.activator_port,
                api_keys=self.api_keys is not None,
            )
            await stopping.wait()
            self._serving.clear()
            self._log.info("gateway draining", drain_timeout=opts.drain_timeout)
            await stop_accepting(runner)
            await self._connections.drain(within=opts.drain_timeout)
        finally:
            self._serving.clear()
            await runner.cleanup()
            await self.proxy.close()
            self._log.info("gateway stopped")

    # Handlers

    async def _models(self, _: web.Request) -> web.Response:
        if not self.catalog.has_synced():
            raise errors.not_ready()
        return web.json_response(self.catalog.model_list())

    async def _model(self, request: web.Request) -> web.Response:
        name = body.check_model_name(request.match_info["model"], "model")
        if not self.catalog.has_synced():
            raise errors.not_ready()
        card = self.catalog.model_card(name)
        if card is None:
            raise errors.model_not_found(name, self.catalog.served_names())
        _EXCHANGE.get().model = name  # a served name only: client input never becomes a label
        return web.json_response(card)

    async def _inference(self, capability: engines.Capability, request: web.Request) -> web.StreamResponse:
        exchange = _EXCHANGE.get()
        raw = await body.read_body(request, self.options.max_body_bytes, self.options.body_timeout)
        header_model = request.headers.get(body.MODEL_HEADER)
        if capability in engines.MULTIPART:
            inference = body.parse_form(raw, request.headers.get(hdrs.CONTENT_TYPE), header_model)
        else:
            inference = body.parse(raw, header_model)
        if not self.catalog.has_synced():
            raise errors.not_ready()
        name = inference.model
        adapter = None if self.catalog.serves(name) else self.catalog.adapter(name)
        if adapter is None and not self.catalog.serves(name):
            raise errors.model_not_found(name, self.catalog.served_names())
        exchange.model = name  # a served name only: client input never becomes a label
        model = name if adapter is None else adapter.model
        if capability not in self.catalog.capabilities(model):
            raise errors.unsupported_endpoint(name, request.path)
        if adapter is not None and (why := self.catalog.left_out(adapter)) is not None:
            raise errors.no_ready_endpoint(name, why, errors.Unready.ADAPTER_UNAVAILABLE)
        band = self._band(request)
        admission = self._admit(exchange, inference)
        try:
            return await self._route(capability, request, inference, exchange, adapter, model, name, band)
        finally:
            admission.finish(exchange.usage, answered=exchange.first_byte is not None)

    def _band(self, request: web.Request) -> int:
        """The request's priority band (`flow.priority`): its header, else its key's, else the default."""
        caller = _CALLER.get()
        policy = None if caller is None else caller.policy
        try:
            return band_of(
                request.headers.get(PRIORITY_HEADER), caller is not None, None if policy is None else policy.priority
            )
        except PriorityError as err:
            raise errors.invalid_priority(PRIORITY_HEADER, str(err)) from None

    def _admit(self, exchange: Exchange, inference: body.InferenceRequest) -> Admission:
        """Check the request against the max_tokens cap and its key's limits, and hold its share of them."""
        asked = max_tokens_of(inference.document)
        cap = self.options.max_tokens_cap
        if cap is not None and asked is not None and asked[1] > cap:
            exchange.rejection = "max_tokens"
            raise errors.max_tokens_too_large(asked[0], asked[1], cap)
        caller = _CALLER.get()
        if caller is None or caller.policy is None:
            return UNLIMITED
        reservation = reservation_of(inference.body, inference.document, self.options.default_max_tokens_reservation)
        try:
            return self.limits.admit(caller.policy, reservation, inference.stream)
        except LimitReachedError as refusal:
            exchange.rejection = refusal.limit
            raise errors.rate_limited(refusal.limit, refusal.retry_after, refusal.detail) from None

    async def _route(
        self,
        capability: engines.Capability,
        request: web.Request,
        inference: body.InferenceRequest,
        exchange: Exchange,
        adapter: Adapter | None,
        model: str,
        name: str,
        band: int,
    ) -> web.StreamResponse:
        holding = None if adapter is None else functools.partial(self._holding, adapter)
        caller = _CALLER.get()
        may_wake = caller is None or caller.may_wake
        with self.in_flight.request(model):
            endpoints = self.catalog.endpoints(model)
            ticket: Ticket | None = None
            try:
                if not endpoints:
                    # Held while a replica comes: scaling says how (and scales a sleeping model up), then routing
                    # is waited on for its endpoint, up to the bound of that case; under flow control the request
                    # waits in the model's queue meanwhile, and leaves it in the queue's order.
                    with self._step("hold", name) as span:
                        started = asyncio.get_running_loop().time()
                        coming = await self._replica_coming(model, name, started + self.options.wake_timeout, may_wake)
                        span.set_attribute("llmaz.hold.reason", "waking" if coming is Coming.WAKING else "starting")
                        bound = self.options.wake_timeout if coming is Coming.WAKING else self.options.hold_timeout
                        if self.flow is None:
                            endpoints = await self._held(model, started + bound, holding)
                        else:
                            bound = max(bound, self.flow.options.queue_ttl)
                            ticket = await self._queued_while_coming(model, name, band, inference, started + bound)
                            endpoints = self._endpoints_now(model, holding)
                            if not endpoints and holding is not None:  # its turn came, its adapter did not yet
                                endpoints = await self._held(model, started + bound, holding)
                        span.set_attribute("llmaz.hold.endpoints", len(endpoints))
                    if not endpoints and not self.catalog.serves(model):
                        raise errors.model_not_found(name, self.catalog.served_names())
                    if not endpoints and coming is Coming.WAKING:
                        raise errors.wake_timeout(name, bound)
                    if not endpoints:
                        raise errors.not_ready_in_time(name, bound)
                elif holding is not None and not (endpoints := holding(endpoints)):
                    # Ready replicas, none holding the adapter yet: the new ones of a rollout that adds it are coming.
                    with self._step("hold", name) as span:
                        span.set_attribute("llmaz.hold.reason", "adapter")
                        bound = self.options.hold_timeout
                        deadline = asyncio.get_running_loop().time() + bound
                        endpoints = await self._held(model, deadline, holding)
                        span.set_attribute("llmaz.hold.endpoints", len(endpoints))
                    if not endpoints:
                        raise errors.not_ready_in_time(name, bound)
                if ticket is None:
                    ticket = await self._turn(model, name, band, inference)
                    if ticket is not None and ticket.queued:  # the endpoints may have changed while it waited
                        endpoints = self._endpoints_now(model, holding)
                        if not endpoints:
                            raise errors.no_ready_endpoint(name)
                return await self._send(
                    capability, request, inference, exchange, adapter, model, name, endpoints, ticket
                )
            finally:
                if ticket is not None:
                    usage = exchange.usage
                    ticket.finish(None if usage is None else usage.prompt_tokens + usage.completion_tokens)

    def _endpoints_now(self, model: str, holding: Callable[[list[Endpoint]], list[Endpoint]] | None) -> list[Endpoint]:
        endpoints = self.catalog.endpoints(model)
        return endpoints if holding is None or not endpoints else holding(endpoints)

    def _flow_identity(self, inference: body.InferenceRequest) -> tuple[str, int]:
        """The request's tenant ("" without API keys) and estimated cost in tokens, for flow control."""
        caller = _CALLER.get()
        tenant = "" if caller is None else caller.tenant
        return tenant, reservation_of(inference.body, inference.document, self.options.default_max_tokens_reservation)

    async def _queued_while_coming(
        self, model: str, name: str, band: int, inference: body.InferenceRequest, deadline: float
    ) -> Ticket | None:
        """Under flow control, a request for a model that has no endpoint yet (one is coming) waits in the model's
        queue until `deadline` (the event loop's clock), counted as held meanwhile: its ticket, or None when no
        endpoint came in time or the model stopped being served (the caller answers as without flow control).
        Routing is watched for the model's endpoints: when they come, the queue is pumped (its waiters leave in its
        order, as room allows)."""
        assert self.flow is not None
        flow = self.flow
        loop = asyncio.get_running_loop()
        tenant, cost = self._flow_identity(inference)
        ttl = max(deadline - loop.time(), 1e-3)
        with self.metrics.held_of(model).track_inprogress():
            waiting = asyncio.ensure_future(flow.wait(model, band, tenant, cost, ttl))
            watching = asyncio.ensure_future(self.catalog.await_endpoints(model, deadline))
            try:
                done, _ = await asyncio.wait({waiting, watching}, return_when=asyncio.FIRST_COMPLETED)
                if waiting not in done:
                    if watching.result():
                        flow.pump(model)
                    elif not self.catalog.serves(model):
                        return None  # nothing is coming for it any more
                return await waiting
            except ShedError as shed:
                if shed.reason == NO_ENDPOINT:
                    _EXCHANGE.get().rejection = shed.reason
                    return None
                raise self._refused(shed, name, ttl) from None
            finally:
                for task in (waiting, watching):
                    task.cancel()
                await asyncio.gather(waiting, watching, return_exceptions=True)

    def _refused(self, shed: ShedError, name: str, ttl: float) -> errors.OpenAIError:
        """The answer to a request flow control refused, after waiting up to `ttl` seconds."""
        _EXCHANGE.get().rejection = shed.reason
        if shed.reason == NO_ENDPOINT:
            return errors.no_ready_endpoint(name)
        if shed.reason == QUEUE_FULL:
            why = "its queue is full, and this request was the newest of the lowest priority waiting"
        else:
            why = f"no room freed within {ttl:g} s"
        return errors.model_saturated(name, why, shed.retry_after, shed.reason)

    async def _turn(self, model: str, name: str, band: int, inference: body.InferenceRequest) -> Ticket | None:
        """The request's turn under flow control (None when it is off): at once when `model` is not saturated and
        nothing of it is queued, else once its queue dispatches it; a refusal when it is shed or waits too long."""
        if self.flow is None:
            return None
        tenant, cost = self._flow_identity(inference)
        ticket = self.flow.try_admit(model, band, tenant, cost)
        if ticket is not None:
            return ticket
        with self._step("queue", name) as span:
            span.set_attribute("llmaz.flow.band", band)
            try:
                return await self.flow.wait(model, band, tenant, cost)
            except ShedError as shed:
                raise self._refused(shed, name, self.flow.options.queue_ttl) from None

    async def _send(
        self,
        capability: engines.Capability,
        request: web.Request,
        inference: body.InferenceRequest,
        exchange: Exchange,
        adapter: Adapter | None,
        model: str,
        name: str,
        endpoints: list[Endpoint],
        ticket: Ticket | None,
    ) -> web.StreamResponse:
        """Route the request to one of `endpoints` and relay the answer (`Proxy.forward`)."""
        scheduler = self.pickers.for_playgrounds(self.catalog.playgrounds_serving(model))
        session = request.headers.get(SESSION_HEADER)
        key = None
        if scheduler.needs_key:
            key = routing_key(inference.document, session, name if adapter else None)
        routed = Request(model, endpoints, key, adapter, session_of(inference.document, session))
        engine_of = self.catalog.engine_at(model, self.adapters.engine)
        adapters = self.catalog.adapters_of(model)
        body_for = None
        if adapters and capability not in engines.MULTIPART:  # a form is sent as it came: no adapter scales
            body_for = self._adapter_body(engine_of, adapters, adapter, inference)
        requested = request.rel_url.raw_path

        def path_for(endpoint: Endpoint) -> str:
            return engine_of(endpoint).path_of(capability, requested)

        sent = None if ticket is None else ticket.sent
        return await self.proxy.forward(
            request, inference, routed, exchange, scheduler, body_for, engine_of, path_for, sent
        )

    async def _held(
        self, model: str, deadline: float, holding: Callable[[list[Endpoint]], list[Endpoint]] | None
    ) -> list[Endpoint]:
        """The request waits on routing for an endpoint (`Catalog.await_endpoints`), counted as held meanwhile."""
        with self.metrics.held_of(model).track_inprogress():
            return await self.catalog.await_endpoints(model, deadline, holding)

    def _holding(self, adapter: Adapter, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The endpoints holding `adapter` (the schedulers' adapter filter): those whose engine lists it, and those
        whose listing is not known."""
        return self.pickers.holds_adapter.holders(adapter, endpoints)

    def _adapter_body(
        self,
        engine_of: Callable[[Endpoint], engines.Engine],
        adapters: list[Adapter],
        named: Adapter | None,
        inference: body.InferenceRequest,
    ) -> Callable[[Endpoint], bytes]:
        """What each endpoint is sent for a request for a model with `adapters`, naming the adapter `named` or the
        base model (None): made for the engine at the endpoint (`engine_of`) and the adapters it lists."""

        left_out: dict[Endpoint, frozenset[str]] | None = None

        def body_for(endpoint: Endpoint) -> bytes:
            nonlocal left_out
            member = engine_of(endpoint).adapters.scales_member
            listing = self.adapters.adapters(endpoint)
            held = adapters
            if listing is None and member is not None:  # not listed yet: what its Service says it loaded
                left_out = self.catalog.left_out_at(adapters[0].model) if left_out is None else left_out
                held = loaded(adapters, left_out.get(endpoint, frozenset()))
            return engine_body(member, listing, held, named, inference.body, inference.document)

        return body_for

    async def _replica_coming(self, model: str, name: str, deadline: float, may_wake: bool) -> Coming:
        """Ask scaling how a replica of `model` is coming; the 503 that says why when none is (naming `name`, the
        model or adapter the request named)."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self.waker.wake(model, may_wake=may_wake)
        except WakeNotAllowedError:
            _EXCHANGE.get().rejection = "may_wake"
            raise errors.wake_not_allowed(name) from None
        except NotComingError as err:
            raise errors.no_ready_endpoint(name, str(err)) from None
        except ScaleUpError as err:
            raise errors.wake_failed(name, str(err)) from None
        except TimeoutError:
            raise errors.wake_timeout(name, self.options.wake_timeout) from None

    # Middleware: authentication, errors in OpenAI's shape, metrics and one log line per request

    @web.middleware
    async def _observe(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        exchange = Exchange(model="")
        _EXCHANGE.set(exchange)
        _CALLER.set(None)
        if not self._tracing:
            return await self._exchange(request, handler, exchange)
        route = request.match_info.route.resource
        path = route.canonical if route is not None else None
        root = self.tracer.start_span(
            f"{request.method} {path}" if path else request.method,
            context=tracing.extract(request.headers),
            kind=trace.SpanKind.SERVER,
        )
        try:
            with trace.use_span(root, record_exception=False, set_status_on_exception=False):
                return await self._exchange(request, handler, exchange)
        finally:
            if root.is_recording():
                _close_root(root, request, path, exchange)

    async def _exchange(self, request: web.Request, handler: Handler, exchange: Exchange) -> web.StreamResponse:
        try:
            resp = await self._answer(request, handler)
            exchange.status = exchange.status or resp.status
            return resp
        except asyncio.CancelledError:
            exchange.status = CLIENT_CLOSED
            raise
        finally:
            self._record(request, exchange)

    @contextlib.contextmanager
    def _step(self, name: str, model: str | None = None) -> Iterator[trace.Span]:
        """A span of one step of the request, current inside the block; a refusal marks it an error, by its code
        alone (an error's message may quote what the client sent)."""
        attributes = {"llmaz.model": model} if model else None
        with self.tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except errors.OpenAIError as exc:
                span.set_status(trace.StatusCode.ERROR, exc.code)
                raise
            except BaseException as exc:
                span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                raise

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if self.api_keys is not None:
                with self._step("auth"):
                    caller = self.api_keys.check(request.headers.get(hdrs.AUTHORIZATION))
                _CALLER.set(caller)
                _EXCHANGE.get().tenant = caller.tenant
            return await handler(request)
        except errors.OpenAIError as exc:
            exchange = _EXCHANGE.get()
            exchange.detail = exc.detail
            if exc.tenant is not None:  # a key known but refused (expired)
                exchange.tenant, exchange.rejection = exc.tenant, exc.detail
            return exc.response()
        except web.HTTPException as exc:
            return errors.from_http_exception(exc, request.method, request.path).response()
        except Exception as exc:
            # Neither the exception's repr nor a formatted traceback: either may quote the request's headers.
            self._log.error(
                "request failed",
                path=request.path[:_LOGGED_PATH_CHARS],
                error=sanitised_error(exc, request.headers),
                stack="".join(traceback.format_tb(exc.__traceback__))[-_LOGGED_STACK_CHARS:],
            )
            return errors.internal_error().response()

    def _record(self, request: web.Request, exchange: Exchange) -> None:
        now = time.monotonic()
        model, code = exchange.model, exchange.status
        self.metrics.answered(model, code, now - exchange.started)
        if exchange.first_byte is not None:
            self.metrics.first_byte(model, exchange.first_byte - exchange.started)
        if exchange.usage is not None:
            self.metrics.tokens(model, exchange.usage)
        if exchange.tenant is not None:
            self.metrics.tenant_answered(exchange.tenant, code, exchange.usage, exchange.rejection)
        if code >= 500 or exchange.truncated:
            log = self._log.warning
        elif self._log.is_enabled_for(logging.DEBUG):  # the line's fields are not worth building otherwise
            log = self._log.debug
        else:
            return
        log(
            "request",
            method=request.method,
            path=request.path[:_LOGGED_PATH_CHARS],
            model=model,
            code=code,
            endpoint=str(exchange.endpoint) if exchange.endpoint else None,
            attempts=exchange.attempts,
            seconds=round(now - exchange.started, 6),
            detail=exchange.detail,
        )


def _close_root(root: trace.Span, request: web.Request, route: str | None, exchange: Exchange) -> None:
    """The request's span, ended with what happened: never a header or a body."""
    attributes: dict[str, str | int] = {
        "http.request.method": request.method,
        "url.path": request.path[:_LOGGED_PATH_CHARS],
        "http.response.status_code": exchange.status,
        "llmaz.attempts": exchange.attempts,
    }
    if route:
        attributes["http.route"] = route
    if exchange.model:
        attributes["llmaz.model"] = exchange.model  # a served name only
    if exchange.endpoint is not None:
        attributes["llmaz.endpoint"] = str(exchange.endpoint)
    root.set_attributes(attributes)
    if exchange.status >= 500:
        root.set_status(trace.StatusCode.ERROR)
    root.end()

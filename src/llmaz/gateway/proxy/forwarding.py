"""Forwarding one inference request to an engine endpoint and relaying the answer as it arrives.

Invariants:
- Nothing is buffered on the way back: each chunk read from the engine is written to the client at once
  (aiohttp writes straight to the socket and waits only when the socket's buffer is full), so a stream's
  events reach the client as the engine produces them, and a slow client slows the engine's stream down
  instead of growing the gateway's memory.
- A retry happens only before the client was sent anything, and only when the engine cannot have started on
  the request or refused it: a failed or timed-out connect, a connection closed before the response (also a
  pooled keep-alive connection the engine had just closed), or a 503. Each retry goes to an endpoint not yet
  tried, at most `retries` times. A read timeout before the response is a 504 and is not retried: the engine
  may still be working on it, and sending it again would double the load exactly when an engine is slow.
- When every attempt failed to connect: 502 (504 when the last one timed out). When the last attempt got a
  503, that answer is relayed as it is (it is the engine's).
- Once the status line went out, an engine failure or timeout mid-answer closes the client's connection, so
  the client sees a truncated answer (an incomplete chunked body, or fewer bytes than Content-Length), never
  a complete-looking one; nothing is retried.
- A client that goes away ends the request: the handler is cancelled (the server runs with handler
  cancellation) or its next write fails, and leaving the upstream response's context closes the engine
  connection, which is how the engine learns to stop generating.
- Every attempt goes where the routing scheduler (`routing.scheduler`) decides, scheduled afresh with the
  endpoints already tried excluded; it is between the scheduler's `pre_request` (counted in flight, recorded by
  the scheduler's plugins) and `post_response` (released, with the prompt's usage when the engine reported it),
  however it ends (`try`/`finally`).
- To an engine that reuses a cached prompt serially (`engines.PromptReuse.SERIAL`: llama.cpp), a request whose
  pick is serving another attempt of its prefix, or that was moved off its prefix's full home, first waits for an
  attempt there to end, at most what recomputing the prompt costs (`Scheduler.decide`, `routing.holds`), and is
  then scheduled again; on its first attempt only.
- A streamed request to an engine whose rule says so (`engines.Engine.close_after_stream`: llama.cpp, and an
  engine not known) goes on a connection of its own, closed at its end (`Connection: close`): llama.cpp closes a
  connection after a stream while its headers still say keep-alive, so a pooled one would lose the next request.
  Every other request, streamed or not, reuses pooled keep-alive connections.
- A request goes to the path it came on, or to the one `path_for(endpoint)` names (the path the engine there serves
  the endpoint at, `engines.Engine.path_of`), with the query string as received.
- The request body is sent as received, or as `body_for(endpoint)` makes it for the endpoint an attempt goes to
  (an engine that takes adapter scales in the body is sent them, `routing.adapters`). Hop-by-hop headers, Host,
  Content-Length and Content-Encoding (aiohttp has decoded a compressed body) are not forwarded; Authorization is
  not forwarded when the gateway checks API keys (it carries the gateway's key, not the engine's). Engine
  responses are relayed with their status and headers, minus hop-by-hop ones.
- No request header value reaches a log line: a failure is logged as its type and a message (`sanitised_error`)
  from which the request's credentials (Authorization, API keys, cookies) are cut. aiohttp's `repr` of an
  upstream error quotes the request's headers, and so a client's `Authorization` when it is forwarded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy
from opentelemetry import trace
from yarl import URL

from llmaz.gateway.proxy import errors
from llmaz.gateway.proxy.body import InferenceRequest
from llmaz.gateway.proxy.metrics import CLIENT_CLOSED, GatewayMetrics
from llmaz.gateway.proxy.usage import Usage, meter_for
from llmaz.gateway.routing import engines
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import Decision, PromptUsage, Request, Scheduler
from llmaz.runtime import tracing
from llmaz.runtime.log import get_logger

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "content-encoding", "expect"}
_NOT_RELAYED = HOP_BY_HOP | {"content-length"}
# Failures that happen before an engine can have started on a request (see the module invariants).
RETRYABLE = (
    aiohttp.ClientOSError,  # connection refused, reset, unreachable (ClientConnectorError is one)
    aiohttp.ClientConnectionResetError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ConnectionTimeoutError,
)
# Request headers that carry credentials: their values are cut from every logged error text.
SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie", "set-cookie", "x-auth-token"}
)
REDACTED = "[redacted]"
# Secrets shorter than this are not searched for: cutting every "a" from a message would say nothing.
_MIN_SECRET_CHARS = 4
_LOGGED_ERROR_CHARS = 512
# Below the 5 s keep-alive timeout of uvicorn (vLLM, SGLang) so a pooled connection is not reused just as the
# engine closes it; a reuse that loses the race anyway is retried (ServerDisconnectedError).
UPSTREAM_KEEPALIVE_SECONDS = 4.0
# How much of an engine path a span keeps.
_TRACED_PATH_CHARS = 200


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    connect_timeout: float = 5.0
    """Seconds to connect to an engine endpoint before trying another one. Default 5."""
    read_timeout: float = 300.0
    """Seconds to wait for the engine's response, and then for each chunk of it. Default 300."""
    retries: int = 2
    """Further endpoints to try after a retryable failure (see the module invariants). Default 2."""
    forward_authorization: bool = True
    """Pass the client's Authorization header to the engine; off when the gateway checks API keys."""
    resolve: Mapping[str, str] = field(default_factory=dict)
    """Connect to `resolve[address]` for an endpoint whose address is `address` (curl's `--resolve`), e.g. to
    reach an engine through a port-forward when debugging. Balancing, logs and metrics keep the endpoint's own
    address. Default: none."""


@dataclass(slots=True)
class Exchange:
    """What happened to one request, for the server's metrics and log line."""

    model: str
    started: float = field(default_factory=time.monotonic)
    status: int = 0
    endpoint: Endpoint | None = None
    attempts: int = 0
    first_byte: float | None = None
    usage: Usage | None = None
    truncated: bool = False
    detail: str | None = None
    """Why the gateway answered as it did, for the log line only (clients get a generic reason)."""
    tenant: str | None = None
    """The tenant of the request's API key, once authenticated (None without API keys)."""
    rejection: str | None = None
    """Why a known tenant's request was refused (a limit, the max_tokens cap, may-wake), for the tenant metrics."""


def _secrets(headers: Mapping[str, str] | None) -> list[str]:
    """The credential values in `headers`, and each one's token after its scheme (`Bearer <token>`)."""
    found: set[str] = set()
    for name, value in (headers or {}).items():
        if name.lower() not in SENSITIVE_HEADERS:
            continue
        for part in (value, *value.split()):
            part = part.strip(" ;,")
            if len(part) >= _MIN_SECRET_CHARS:
                found.add(part)
    return sorted(found, key=len, reverse=True)  # the whole value first, then its parts


def sanitised_error(exc: BaseException, headers: Mapping[str, str] | None = None) -> str:
    """`exc` for a log line: its type and message, never a request header.

    An upstream `ClientResponseError` is described by its status and message alone (its `repr` holds the request's
    headers); any text left is cut of the credential values `headers` (the client's request headers) carry, and
    bounded.
    """
    if isinstance(exc, aiohttp.ClientResponseError):
        message = f"status={exc.status}, message={exc.message!r}"
    else:
        message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    for secret in _secrets(headers):
        text = text.replace(secret, REDACTED)
    return text if len(text) <= _LOGGED_ERROR_CHARS else text[:_LOGGED_ERROR_CHARS] + "..."


def _prompt_usage(exchange: Exchange, outcome: object) -> PromptUsage | None:
    """What the engine reported of the prompt, for the scheduler, when an attempt was answered and it did."""
    usage = exchange.usage
    if not isinstance(outcome, web.StreamResponse) or usage is None:
        return None
    return PromptUsage(usage.prompt_tokens, usage.cached_tokens)


def _usage_attributes(usage: Usage) -> dict[str, int]:
    """A relayed answer's token counts, as span attributes (OpenTelemetry's GenAI names where there are some)."""
    attributes = {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
    }
    if usage.cached_tokens is not None:
        attributes["llmaz.usage.cached_tokens"] = usage.cached_tokens
    return attributes


def _listed_in_connection(headers: CIMultiDictProxy[str]) -> set[str]:
    return {token.strip().lower() for value in headers.getall(hdrs.CONNECTION, []) for token in value.split(",")}


def upstream_headers(
    headers: CIMultiDictProxy[str], remote: str | None, *, forward_authorization: bool
) -> CIMultiDict[str]:
    skip = _NOT_FORWARDED | _listed_in_connection(headers)
    if not forward_authorization:
        skip = skip | {"authorization"}
    out = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in skip)
    if hdrs.CONTENT_TYPE not in out:
        out[hdrs.CONTENT_TYPE] = "application/json"  # the body was parsed as JSON; engines may insist on it
    if remote:
        forwarded = out.get(hdrs.X_FORWARDED_FOR)
        out[hdrs.X_FORWARDED_FOR] = f"{forwarded}, {remote}" if forwarded else remote
    return out


def relayed_headers(headers: CIMultiDictProxy[str]) -> Iterable[tuple[str, str]]:
    skip = _NOT_RELAYED | _listed_in_connection(headers)
    return [(k, v) for k, v in headers.items() if k.lower() not in skip]


class Proxy:
    def __init__(self, metrics: GatewayMetrics, options: ProxyOptions, tracer: trace.Tracer | None = None) -> None:
        """`tracer`: where each attempt's spans go (its pick, its call up to the first byte, the rest of the answer),
        and the engine is sent the call's `traceparent`; None: tracing is off."""
        self._metrics = metrics
        self._options = options
        self._tracer = tracer or trace.NoOpTracer()
        self._tracing = tracer is not None
        self._session: aiohttp.ClientSession | None = None
        self._log = get_logger("llmaz.gateway.proxy")

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_SECONDS)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self._options.connect_timeout, sock_read=self._options.read_timeout
            ),
            auto_decompress=False,  # relay bytes as the engine sent them, Content-Encoding and all
            skip_auto_headers=(hdrs.USER_AGENT, hdrs.ACCEPT_ENCODING, hdrs.ACCEPT),
            cookie_jar=aiohttp.DummyCookieJar(),  # one client's cookies must never reach another's request
            trust_env=False,  # engine traffic stays in the cluster, whatever proxy the environment names
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self,
        request: web.Request,
        inference: InferenceRequest,
        routed: Request,
        exchange: Exchange,
        scheduler: Scheduler,
        body_for: Callable[[Endpoint], bytes] | None = None,
        engine_of: Callable[[Endpoint], engines.Engine] | None = None,
        path_for: Callable[[Endpoint], str] | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> web.StreamResponse:
        """Send `inference` where `scheduler` decides for `routed`, retrying as the module invariants say: each
        attempt is scheduled afresh, the endpoints tried excluded, between the scheduler's `pre_request` and
        `post_response`. Each attempt sends `body_for(endpoint)` when given, else the body as received, to
        `path_for(endpoint)` when given, else the request's path, with the connection rule of the engine there
        (`engine_of(endpoint)`; not given: not known). `on_sent` is called once the first attempt counts in flight
        (flow control's ticket: the request no longer holds a pending grant)."""
        headers = upstream_headers(
            request.headers, request.remote, forward_authorization=self._options.forward_authorization
        )
        closing: CIMultiDict[str] | None = None  # the headers of a stream to an engine that closes after it
        attempts = 1 + max(0, self._options.retries)
        tried: set[Endpoint] = set()
        failure: errors.OpenAIError | None = None
        attempt = routed
        while len(tried) < attempts:
            endpoint = await self._pick(scheduler, attempt, tried, engine_of)
            if endpoint is None:
                break
            tried.add(endpoint)
            last = len(tried) == attempts or len(tried) == len(set(routed.candidates))
            exchange.endpoint, exchange.attempts = endpoint, len(tried)
            scheduler.pre_request(attempt, endpoint)
            if on_sent is not None:
                on_sent()
            outcome: web.StreamResponse | errors.OpenAIError | None = None
            try:
                body = inference.body if body_for is None else body_for(endpoint)
                engine = engines.UNKNOWN if engine_of is None else engine_of(endpoint)
                sent = headers
                if inference.stream and engine.close_after_stream:
                    if closing is None:
                        closing = headers.copy()
                        closing[hdrs.CONNECTION] = "close"
                    sent = closing
                path = request.rel_url.raw_path if path_for is None else path_for(endpoint)
                outcome = await self._attempt(request, path, body, sent, endpoint, exchange, last)
            finally:
                scheduler.post_response(attempt, endpoint, _prompt_usage(exchange, outcome))
            if isinstance(outcome, web.StreamResponse):
                return outcome
            failure = outcome
            attempt = routed.excluding(tried)
        raise failure or errors.no_ready_endpoint(exchange.model)

    async def _pick(
        self,
        scheduler: Scheduler,
        request: Request,
        tried: Collection[Endpoint],
        engine_of: Callable[[Endpoint], engines.Engine] | None,
    ) -> Endpoint | None:
        """The scheduler's pick for `request` (`Scheduler.decide` for the first attempt, which may wait behind the
        request's prefix at an engine that reuses prompts serially; `schedule` for a retry), in a span of its own
        when tracing."""
        if not self._tracing:
            return (await self._decide(scheduler, request, tried, engine_of)).endpoint
        with self._tracer.start_as_current_span("pick") as span:
            decision = await self._decide(scheduler, request, tried, engine_of)
            attributes: dict[str, str | int | bool] = {
                "llmaz.routing.strategy": scheduler.strategy,
                "llmaz.routing.candidates": len(request.candidates) - len(request.excluded),
                "llmaz.attempt": len(tried) + 1,
                "llmaz.routing.held": decision.held,
            }
            if decision.endpoint is not None:
                attributes["llmaz.endpoint"] = str(decision.endpoint)
            if decision.reason is not None:
                attributes["llmaz.routing.reason"] = decision.reason
            if decision.predicted_cached_tokens is not None:
                attributes["llmaz.routing.predicted_cached_tokens"] = decision.predicted_cached_tokens
            span.set_attributes(attributes)
            return decision.endpoint

    @staticmethod
    async def _decide(
        scheduler: Scheduler,
        request: Request,
        tried: Collection[Endpoint],
        engine_of: Callable[[Endpoint], engines.Engine] | None,
    ) -> Decision:
        if tried or engine_of is None:
            return scheduler.schedule(request)
        return await scheduler.decide(request, engine_of)

    async def _attempt(
        self,
        request: web.Request,
        path: str,
        body: bytes,
        headers: CIMultiDict[str],
        endpoint: Endpoint,
        exchange: Exchange,
        last: bool,
    ) -> web.StreamResponse | errors.OpenAIError:
        """The engine's answer, relayed; or, when another endpoint may be tried, why this one could not answer."""
        assert self._session is not None, "Proxy.start() first"
        query = request.rel_url.raw_query_string
        url = URL(endpoint.connect_url(self._options.resolve) + path + (f"?{query}" if query else ""), encoded=True)
        model = exchange.model
        call = self._tracer.start_span("upstream", kind=trace.SpanKind.CLIENT)
        if self._tracing:
            call.set_attributes(
                {
                    "http.request.method": request.method,
                    "server.address": endpoint.address,
                    "server.port": endpoint.port,
                    "url.path": path[:_TRACED_PATH_CHARS],
                    "llmaz.attempt": exchange.attempts,
                }
            )
            headers = headers.copy()
            tracing.inject(headers, call)  # the engine continues the trace under this call
        try:
            try:
                upstream = await self._session.request(
                    request.method, url, data=body, headers=headers, allow_redirects=False
                )
            except RETRYABLE as exc:
                error = sanitised_error(exc, request.headers)
                self._log.info("endpoint failed", model=model, endpoint=str(endpoint), error=error)
                call.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                if not last:
                    self._metrics.retried(model, "connect_error")
                timed_out = isinstance(exc, aiohttp.ConnectionTimeoutError)
                return (errors.upstream_timeout if timed_out else errors.bad_gateway)(model)
            except (aiohttp.ServerTimeoutError, TimeoutError):
                call.set_status(trace.StatusCode.ERROR, "timeout")
                raise errors.upstream_timeout(model) from None
            except aiohttp.ClientError as exc:
                error = sanitised_error(exc, request.headers)
                self._log.info("endpoint failed", model=model, endpoint=str(endpoint), error=error)
                call.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                raise errors.bad_gateway(model) from None
            call.set_attribute("http.response.status_code", upstream.status)
            async with upstream:
                if upstream.status == 503 and not last:
                    self._metrics.retried(model, "unavailable")
                    return errors.no_ready_endpoint(model)
                return await self._relay(request, upstream, exchange, call)
        finally:
            tracing.end(call)

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        exchange: Exchange,
        call: trace.Span = trace.INVALID_SPAN,
    ) -> web.StreamResponse:
        """Relay `upstream`'s answer; `call` (the attempt's span) ends at the first byte, where the span of the rest
        of the answer starts."""
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        resp.headers.extend(relayed_headers(upstream.headers))
        if upstream.content_length is not None and hdrs.TRANSFER_ENCODING not in upstream.headers:
            resp.content_length = upstream.content_length
        meter = meter_for(upstream.headers.get(hdrs.CONTENT_TYPE, ""), upstream.headers.get(hdrs.CONTENT_ENCODING, ""))
        exchange.status = upstream.status
        rest: trace.Span = trace.INVALID_SPAN
        try:
            await resp.prepare(request)
            while True:
                try:
                    chunk = await upstream.content.readany()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self._abort(request, exchange, exc)
                    rest.set_attribute("llmaz.truncated", True)
                    rest.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                    return resp
                if not chunk:
                    break
                if exchange.first_byte is None:
                    exchange.first_byte = time.monotonic()
                    if self._tracing:
                        tracing.end(call)
                        rest = self._tracer.start_span("stream")
                await resp.write(chunk)
                meter.feed(chunk)
            await resp.write_eof()
            exchange.usage = usage = meter.result()
            if usage is not None and rest.is_recording():
                rest.set_attributes(_usage_attributes(usage))
        except ConnectionResetError:  # the client went away (aiohttp's ClientConnectionResetError is one)
            exchange.status = CLIENT_CLOSED
            rest.set_attribute("llmaz.client_closed", True)
        finally:
            tracing.end(rest)
        return resp

    def _abort(self, request: web.Request, exchange: Exchange, exc: BaseException) -> None:
        exchange.truncated = True
        self._log.warning(
            "engine failed mid-answer, closing the client connection",
            model=exchange.model,
            endpoint=str(exchange.endpoint),
            error=sanitised_error(exc, request.headers),
        )
        if request.transport is not None:
            request.transport.close()

"""One ext_proc stream: a gateway's HTTP request, read, routed by the scheduler, and followed until it ends.

The conversation (`Conversation`, one per gRPC stream; Envoy opens one per HTTP request):

    request headers     -> with API keys, the `authorization` header checked first (the proxy's `Authenticator`:
                           its statuses and refusals; the header is never kept nor logged, and is taken off the
                           request the gateway sends on); the subset hint read from the filter metadata; then, when
                           a body follows:
                           request body BUFFERED:             answered at once (continue), the body comes whole;
                           request body FULL_DUPLEX_STREAMED: not answered yet, body chunks come until the last;
    the body, complete  -> parsed (at most `max_body_bytes`), its model found, held while it has no ready endpoint
                           (below), the scheduler asked; the answer is the header
                           `x-gateway-destination-endpoint: ip:port[,ip:port...]` (the pick, then up to
                           `fallbacks` of its fallbacks, best first) and the same value in dynamic metadata
                           `envoy.lb`; in full duplex it goes on the delayed headers answer, followed by every body
                           chunk sent back unchanged;
    response headers,
    body and trailers   -> passed through (echoed in full duplex); the endpoint that served is read from metadata
                           `envoy.lb` / `x-gateway-destination-endpoint-served`; the usage from the body's end;
    the stream closes   -> the attempt ends: `post_response`, once, however the stream ended; the request stops
                           counting in flight.

Holding, as the proxy holds (`Serving` carries the proxy's waker, in-flight count and bounds): a request counts in
flight for its model from routing (held included) to the stream's end, as a proxied one does, so idle detection
and the request autoscaler see it. A model with no ready endpoint asks scaling whether one is coming
(`Waker.wake`, which scales a sleeping model from zero, unless the caller's key may not wake it); when one is, the
conversation awaits routing (`Catalog.await_endpoints`) up to `wake_timeout` (scaling from zero, then 504
`model_wake_timeout`) or `hold_timeout` (replicas starting, then 503 `model_not_ready`), and is answered with the
route once an endpoint is ready; a model that stops being served meanwhile is 404 at once; when none is coming,
503 `model_not_ready` at once. An adapter no ready replica holds yet is held up to `hold_timeout` the same way.
The subset hint narrows the endpoints after the hold: a request is never routed outside it (503
`no_eligible_endpoint`).

Each routed request's decision time, from its headers to its destination (a hold included), goes to the gateway's
metrics (`Serving.metrics`, `llmaz_gateway_epp_decision_seconds`); a refused request has none.

Fallbacks are off by default: Envoy's ORIGINAL_DST cluster, which GIE's reference configuration routes with,
connects to the one address its header names and answers 503 (no healthy upstream) to a list.

The body modes come from the filter's `protocol_config`, which Envoy sends on a stream's first message; without
it, the request body is taken to be BUFFERED. A request whose headers end the stream (no body) is routed by the
model the header `x-ai-eg-model` names. Refusals are ImmediateResponses with OpenAI's error JSON (the proxy's own,
`llmaz.gateway.proxy.errors`, where the proxy makes the same refusal, with its headers: `Retry-After`,
`WWW-Authenticate`): 401 for a missing or refused key; 429 for a key's limit reached (its requests or tokens per
minute, its streams: held from routing to the stream's end, on the proxy's buckets); 400 for a request asking more
tokens than the cap, for a body that is not a JSON object naming a model, and for a message out of order or with
nothing in it; 404 (`model_not_found`) for a model no Playground serves; 413 for a body over the bound; 501
(`unsupported_endpoint`) for a path of OpenAI's API (the `:path` header) the model's engine does not serve, before
anything is woken or held; 503/504 as above, and 503 when the catalog has not synced yet. After one, the stream
ends.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from envoy.config.core.v3 import base_pb2 as core
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from llmaz.gateway.proxy.auth import Authenticator, Caller
from llmaz.gateway.proxy.errors import (
    OpenAIError,
    Unready,
    max_tokens_too_large,
    model_not_found,
    no_ready_endpoint,
    not_ready_in_time,
    rate_limited,
    unsupported_endpoint,
    wake_failed,
    wake_not_allowed,
    wake_timeout,
)
from llmaz.gateway.proxy.limits import (
    DEFAULT_MAX_TOKENS_RESERVATION,
    Admission,
    LimitReachedError,
    Limits,
    max_tokens_of,
    reservation_of,
)
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.usage import Usage
from llmaz.gateway.proxy.usage import usage_of as tokens_used
from llmaz.gateway.routing import engines
from llmaz.gateway.routing.adapters import Adapter
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals
from llmaz.gateway.routing.picker import Pickers
from llmaz.gateway.routing.prefix import SESSION_HEADER, routing_key, session_of
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage, Request, Scheduler
from llmaz.gateway.scaling.outlook import Coming
from llmaz.gateway.scaling.waker import NotComingError, ScaleUpError, WakeNotAllowedError, Waker
from llmaz.runtime.log import get_logger

DESTINATION_HEADER: Final = "x-gateway-destination-endpoint"
LB_NAMESPACE: Final = "envoy.lb"
SERVED_KEY: Final = "x-gateway-destination-endpoint-served"
SUBSET_NAMESPACE: Final = "envoy.lb.subset_hint"
SUBSET_KEY: Final = "x-gateway-destination-endpoint-subset"
AUTHORIZATION: Final = "authorization"
MODEL_HEADER: Final = "x-ai-eg-model"
"""The header naming the model of a request without a body (as Envoy AI Gateway sets it)."""
MAX_MODEL_CHARS: Final = 253
DEFAULT_MAX_BODY_BYTES: Final = 10 * 1024 * 1024
USAGE_TAIL_BYTES: Final = 64 * 1024
"""How much of a response body's end is kept to find its usage (an answer's last SSE events, or a whole JSON one)."""
LISTED_MODELS: Final = 20
QUOTED_CHARS: Final = 120

_Mode = processing_mode_pb2.ProcessingMode
NONE: Final = _Mode.NONE
BUFFERED: Final = _Mode.BUFFERED
BUFFERED_PARTIAL: Final = _Mode.BUFFERED_PARTIAL
FULL_DUPLEX_STREAMED: Final = _Mode.FULL_DUPLEX_STREAMED

_LOG = get_logger("llmaz.gateway.epp")


def _quote(text: str) -> str:
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."


class RefusalError(Exception):
    """An answer the EPP makes itself: an HTTP status and OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.headers = dict(headers or {})

    @classmethod
    def of(cls, error: OpenAIError) -> RefusalError:
        """The proxy's answer `error` (the same status, error object and headers), as the EPP sends it."""
        return cls(
            error.status, error.message, error.code or "", type=error.type, param=error.param, headers=error.headers
        )

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code or None}
        return orjson.dumps({"error": error})

    def response(self) -> ext.ProcessingResponse:
        headers = {"content-type": "application/json", **{k.lower(): v for k, v in self.headers.items()}}
        options = [
            core.HeaderValueOption(header=core.HeaderValue(key=k, raw_value=v.encode())) for k, v in headers.items()
        ]
        return ext.ProcessingResponse(
            immediate_response=ext.ImmediateResponse(
                status=http_status_pb2.HttpStatus(code=self.status),
                headers=ext.HeaderMutation(set_headers=options),
                body=self.body(),
                details=self.code or "refused",
            )
        )


def bad_message(message: str) -> RefusalError:
    return RefusalError(400, f"The gateway sent the endpoint picker {message}.", "invalid_processing_request")


def unavailable(message: str, code: str) -> RefusalError:
    return RefusalError(503, message, code, type="server_error")


class Phase(enum.Enum):
    HEADERS = "waiting for the request headers"
    BODY = "reading the request body"
    ROUTED = "routed"


@dataclass(frozen=True, slots=True)
class Attempt:
    scheduler: Scheduler
    request: Request
    endpoint: Endpoint


def _header_mutation(value: str) -> ext.HeaderMutation:
    header = core.HeaderValue(key=DESTINATION_HEADER, raw_value=value.encode())
    return ext.HeaderMutation(
        set_headers=[
            core.HeaderValueOption(header=header, append_action=core.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)
        ]
    )


def _destination_metadata(value: str) -> struct_pb2.Struct:
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION_HEADER: value}})
    return metadata


def _streamed(chunk: bytes, last: bool) -> ext.CommonResponse:
    return ext.CommonResponse(
        body_mutation=ext.BodyMutation(streamed_response=ext.StreamedBodyResponse(body=chunk, end_of_stream=last))
    )


def _endpoint_matches(endpoint: Endpoint, allowed: frozenset[str]) -> bool:
    """Whether the subset names `endpoint`: as `ip:port`, or by its address alone (every port of it)."""
    return str(endpoint) in allowed or endpoint.address in allowed or f"[{endpoint.address}]" in allowed


def _usage_document(tail: bytes) -> dict[str, Any] | None:
    """The part of an answer's end that reports its usage: the whole JSON answer, else the last SSE event with one."""
    try:
        document = orjson.loads(tail)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict):
        return document
    for line in reversed(tail.splitlines()):
        if not line.startswith(b"data:"):
            continue
        try:
            event = orjson.loads(line[5:].strip())
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            return event
    return None


def usage_of(tail: bytes) -> PromptUsage | None:
    """The prompt usage an answer's end reports: a whole JSON answer's `usage`, else the last SSE event with one."""
    document = _usage_document(tail)
    return None if document is None else _prompt_usage(document.get("usage"))


def _prompt_usage(usage: Any) -> PromptUsage | None:
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return PromptUsage(prompt if isinstance(prompt, int) else None, cached if isinstance(cached, int) else None)


@dataclass(frozen=True, slots=True)
class Serving:
    """What every stream shares: routing's catalog and schedulers, the one in-flight count, scaling's waker and the
    bounds of a hold, as the proxy has them."""

    catalog: Catalog
    pickers: Pickers
    in_flight: InFlight | None = None
    """The replica's requests in flight: a request counts for its model from routing (held included) to its end, as
    a proxied one does (idle detection, the autoscaler; the schedulers count its endpoint). None: the schedulers'
    own count."""
    waker: Waker | None = None
    """Scaling's answer to a model with no ready endpoint (and its scale from zero); None: one that never scales."""
    api_keys: Authenticator | None = None
    """The gateway's API keys; None: requests are not authenticated."""
    metrics: GatewayMetrics | None = None
    """The gateway's metrics, for the held-requests gauge and each routed request's decision time
    (`llmaz_gateway_epp_decision_seconds`); None: not recorded."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    fallbacks: int = 0
    """How many of the decision's fallbacks follow the pick in the answer."""
    limits: Limits | None = None
    """The per-key limits the proxy keeps (one set of buckets for both); None: keys' limits are not applied."""
    max_tokens_cap: int | None = None
    """The most tokens a request may ask to generate (400 `max_tokens_too_large` above); None: no cap."""
    default_max_tokens_reservation: int = DEFAULT_MAX_TOKENS_RESERVATION
    """Tokens reserved against a key's tokens-per-minute for a request that does not say how many it may generate."""
    hold_timeout: float = 30.0
    """Seconds a request is held while its model's replicas start (503 `model_not_ready` after)."""
    wake_timeout: float = 300.0
    """Seconds a request is held while its model scales up from zero (504 `model_wake_timeout` after)."""
    recognised: AdapterSignals | None = None
    """Which engine runs at each endpoint, as the engines' metrics show it (else the Playground's BackendRuntime):
    a request to an engine that reuses a cached prompt serially waits behind another of its prefix there."""

    def __post_init__(self) -> None:
        if self.in_flight is None:
            object.__setattr__(self, "in_flight", self.pickers.least_outstanding.in_flight)
        if self.waker is None:
            object.__setattr__(self, "waker", Waker(self.catalog, None))

    @property
    def requests(self) -> InFlight:
        """The in-flight count (never None once made)."""
        assert self.in_flight is not None
        return self.in_flight


class Conversation:
    """One stream's state (see the module docstring). `handle` answers each message; `finish` ends the attempt."""

    def __init__(self, serving: Serving, *, clock: Callable[[], float] = time.perf_counter) -> None:
        """`clock` times the decision, from the request headers to the destination (`Serving.metrics`)."""
        self.serving = serving
        self.clock = clock
        self.catalog = serving.catalog
        self.pickers = serving.pickers
        self.max_body_bytes = serving.max_body_bytes
        self.fallbacks = serving.fallbacks
        self.phase = Phase.HEADERS
        self.request_mode: int = BUFFERED
        self.response_mode: int = NONE
        self.headers: dict[str, str] = {}
        """The request's headers, but its credentials (never kept)."""
        self.caller: Caller | None = None
        """Who sent the request, when the gateway runs with API keys."""
        self.subset: frozenset[str] | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.counted: str | None = None
        """The model the request counts in flight for, from routing to `finish`."""
        self.admission: Admission | None = None
        """The request's hold on its key's limits, from routing to `finish`."""
        self.spent: Usage | None = None
        """The tokens the answer reports it used (when the response body is processed), to settle the key's."""
        self.attempt: Attempt | None = None
        self.destination: str | None = None
        """The value sent: the pick, then its fallbacks."""
        self.served: str | None = None
        """The endpoint the gateway says served the request, when it says."""
        self.usage: PromptUsage | None = None
        self._headers_at = 0.0
        self._tail = bytearray()
        self._first = True
        self._finished = False

    async def handle(self, message: ext.ProcessingRequest) -> tuple[list[ext.ProcessingResponse], bool]:
        """The answers to `message`, and whether the stream is over (an ImmediateResponse was sent). A request
        held for an endpoint is answered once it has one (or past its bound)."""
        try:
            return await self._handle(message), False
        except RefusalError as refusal:
            return [refusal.response()], True
        except OpenAIError as error:
            return [RefusalError.of(error).response()], True

    def finish(self) -> None:
        """The stream ended: the attempt (if one was made) ends, and the request stops counting, once."""
        if self._finished:
            return
        self._finished = True
        if self.attempt is not None:
            attempt = self.attempt
            attempt.scheduler.post_response(attempt.request, attempt.endpoint, self.usage)
        if self.counted is not None:
            self.serving.requests.finished(self.counted)
        if self.admission is not None:
            # Routed: an engine may have answered (with response processing off the EPP cannot tell), so an answer
            # without usage keeps its reservation spent, as the proxy keeps it.
            self.admission.finish(self.spent, answered=self.attempt is not None)

    def ended(self) -> ext.ProcessingResponse | None:
        """The answer to a stream the gateway closed mid-request (after the request headers, before the body's
        end): a 400, for a gateway that still reads; None when the request was routed or had not begun."""
        if self.phase is not Phase.BODY:
            return None
        return bad_message("the end of the stream before the end of the request body").response()

    async def _handle(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        if self._first:
            self._first = False
            if message.HasField("protocol_config"):
                self.request_mode = message.protocol_config.request_body_mode
                self.response_mode = message.protocol_config.response_body_mode
        kind = message.WhichOneof("request")
        if kind is None:
            raise bad_message("a message with nothing in it")
        handler = self._handlers().get(kind)
        if handler is None:
            raise bad_message(f"a message it does not handle ({kind})")
        return await handler(message)

    def _handlers(self) -> dict[str, Callable[[ext.ProcessingRequest], Awaitable[list[ext.ProcessingResponse]]]]:
        return {
            "request_headers": self._request_headers,
            "request_body": self._request_body,
            "request_trailers": self._request_trailers,
            "response_headers": self._response_headers,
            "response_body": self._response_body,
            "response_trailers": self._response_trailers,
        }

    def _expect(self, phase: Phase, what: str) -> None:
        if self.phase is not phase:
            raise bad_message(f"{what} while {self.phase.value}")

    def _mutation(self, value: str) -> ext.HeaderMutation:
        """The route's header; with API keys, the client's key is taken off the request (the engine never sees it)."""
        mutation = _header_mutation(value)
        if self.serving.api_keys is not None:
            mutation.remove_headers.append(AUTHORIZATION)
        return mutation

    # The request

    async def _request_headers(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        self._expect(Phase.HEADERS, "request headers")
        self._headers_at = self.clock()
        self.phase = Phase.BODY  # another headers message is out of order, whatever this one's fate
        headers = message.request_headers
        authorization: str | None = None
        for header in headers.headers.headers:
            value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
            key = header.key.lower()
            if key == AUTHORIZATION:
                authorization = value
            else:
                self.headers[key] = value
        if self.serving.api_keys is not None:
            # First, as in the proxy: nothing about models is revealed without a key.
            self.caller = self.serving.api_keys.check(authorization)
        self.subset = self._subset_hint(message)
        if headers.end_of_stream or self.request_mode == NONE:
            value = await self._route(None)
            return [
                ext.ProcessingResponse(
                    request_headers=ext.HeadersResponse(
                        response=ext.CommonResponse(header_mutation=self._mutation(value))
                    ),
                    dynamic_metadata=_destination_metadata(value),
                )
            ]
        if self.request_mode in (BUFFERED, BUFFERED_PARTIAL):
            return [ext.ProcessingResponse(request_headers=ext.HeadersResponse())]
        if self.request_mode == FULL_DUPLEX_STREAMED:
            return []  # answered with the route, once the body is read
        mode = _Mode.BodySendMode.Name(self.request_mode)
        raise RefusalError(
            500,
            f"The endpoint picker cannot read a request body sent {mode}: configure the ext_proc filter's "
            "processing_mode.request_body_mode as BUFFERED or FULL_DUPLEX_STREAMED.",
            "unsupported_processing_mode",
            type="server_error",
        )

    def _subset_hint(self, message: ext.ProcessingRequest) -> frozenset[str] | None:
        namespace = message.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
        if namespace is None or SUBSET_KEY not in namespace.fields:
            return None
        value = namespace.fields[SUBSET_KEY]
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            entries = [e.strip() for e in value.string_value.split(",")]
        elif kind == "list_value":
            entries = [v.string_value for v in value.list_value.values if v.WhichOneof("kind") == "string_value"]
            if len(entries) != len(value.list_value.values):
                raise bad_message(f"a subset hint ({SUBSET_KEY}) whose entries are not all strings")
        else:
            raise bad_message(f"a subset hint ({SUBSET_KEY}) that is neither a list of endpoints nor a string")
        return frozenset(e for e in entries if e)

    async def _request_body(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        self._expect(Phase.BODY, "a request body")
        body = message.request_body
        self.size += len(body.body)
        if self.size > self.max_body_bytes:
            raise RefusalError(
                413, f"The request body is larger than {self.max_body_bytes} bytes.", "request_too_large"
            )
        self.chunks.append(body.body)
        if self.request_mode == FULL_DUPLEX_STREAMED:
            if not body.end_of_stream:
                return []
            return await self._route_streamed()
        if not body.end_of_stream and self.request_mode == BUFFERED_PARTIAL:
            # Envoy sends a partial body when its buffer is full: the request is larger than the gateway takes.
            raise RefusalError(413, "The request body is larger than the gateway buffers.", "request_too_large")
        value = await self._route(b"".join(self.chunks))
        self.chunks.clear()
        return [
            ext.ProcessingResponse(
                request_body=ext.BodyResponse(response=ext.CommonResponse(header_mutation=self._mutation(value))),
                dynamic_metadata=_destination_metadata(value),
            )
        ]

    async def _route_streamed(self) -> list[ext.ProcessingResponse]:
        """Full duplex: the delayed headers answer with the route, then the body as it came, chunk by chunk."""
        value = await self._route(b"".join(self.chunks))
        answers = [
            ext.ProcessingResponse(
                request_headers=ext.HeadersResponse(response=ext.CommonResponse(header_mutation=self._mutation(value))),
                dynamic_metadata=_destination_metadata(value),
            )
        ]
        chunks = [chunk for chunk in self.chunks if chunk] or [b""]
        for i, chunk in enumerate(chunks):
            answers.append(
                ext.ProcessingResponse(request_body=ext.BodyResponse(response=_streamed(chunk, i == len(chunks) - 1)))
            )
        self.chunks.clear()
        return answers

    async def _request_trailers(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        if self.phase is Phase.HEADERS:
            raise bad_message("request trailers before the request headers")
        answers: list[ext.ProcessingResponse] = []
        if self.phase is Phase.BODY:  # the trailers end the body
            if self.request_mode == FULL_DUPLEX_STREAMED:
                answers = await self._route_streamed()
            else:
                value = await self._route(b"".join(self.chunks))
                self.chunks.clear()
                answers = [
                    ext.ProcessingResponse(
                        request_headers=ext.HeadersResponse(
                            response=ext.CommonResponse(header_mutation=self._mutation(value))
                        ),
                        dynamic_metadata=_destination_metadata(value),
                    )
                ]
        answers.append(ext.ProcessingResponse(request_trailers=ext.TrailersResponse()))
        return answers

    # The response

    async def _response_headers(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        self._expect(Phase.ROUTED, "response headers")
        lb = message.metadata_context.filter_metadata.get(LB_NAMESPACE)
        if lb is not None and SERVED_KEY in lb.fields:
            self.served = lb.fields[SERVED_KEY].string_value or None
        return [ext.ProcessingResponse(response_headers=ext.HeadersResponse())]

    async def _response_body(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        self._expect(Phase.ROUTED, "a response body")
        body = message.response_body
        self._tail += body.body
        if len(self._tail) > USAGE_TAIL_BYTES:
            del self._tail[: len(self._tail) - USAGE_TAIL_BYTES]
        if body.end_of_stream:
            document = _usage_document(bytes(self._tail))
            if document is not None:
                self.usage = _prompt_usage(document.get("usage"))
                self.spent = tokens_used(document)
        if self.response_mode == FULL_DUPLEX_STREAMED:
            response = _streamed(body.body, body.end_of_stream)
        else:
            response = ext.CommonResponse()
        return [ext.ProcessingResponse(response_body=ext.BodyResponse(response=response))]

    async def _response_trailers(self, message: ext.ProcessingRequest) -> list[ext.ProcessingResponse]:
        self._expect(Phase.ROUTED, "response trailers")
        return [ext.ProcessingResponse(response_trailers=ext.TrailersResponse())]

    # Routing

    # Routing

    async def _route(self, body: bytes | None) -> str:
        """Where the request goes (`ip:port[,ip:port...]`), counted in flight there; a refusal when nowhere. A model
        with no ready endpoint is held for one as the proxy holds it (`_endpoints`)."""
        document = self._document(body)
        model = document.get("model") if body else self.headers.get(MODEL_HEADER)
        if not isinstance(model, str) or not model:
            raise RefusalError(
                400,
                "You must provide a model parameter: the body's JSON `model` (or, without a body, the header "
                f"{MODEL_HEADER}).",
                "missing_model",
                param="model",
            )
        if len(model) > MAX_MODEL_CHARS:
            raise RefusalError(
                400, f"The model name is longer than {MAX_MODEL_CHARS} characters.", "invalid_model", param="model"
            )
        if not self.catalog.has_synced():
            raise unavailable("The gateway is starting: its caches are not synced yet.", "not_ready")
        adapter = None if self.catalog.serves(model) else self.catalog.adapter(model)
        if adapter is None and not self.catalog.serves(model):
            raise model_not_found(model, self.catalog.served_names())
        base = model if adapter is None else adapter.model
        path = self.headers.get(":path", "").partition("?")[0]
        capability = engines.API_PATHS.get(path)
        if capability is not None and capability not in self.catalog.capabilities(base):
            # Before anything is woken or held: the model's engine has no such endpoint.
            raise unsupported_endpoint(model, path)
        if adapter is not None and (why := self.catalog.left_out(adapter)) is not None:
            raise no_ready_endpoint(model, why, Unready.ADAPTER_UNAVAILABLE)
        self._admit(body or b"", document)
        if self.counted is None:
            self.counted = base
            self.serving.requests.started(base)
        endpoints = await self._endpoints(base, model, adapter)
        if self.subset is not None:
            endpoints = [e for e in endpoints if _endpoint_matches(e, self.subset)]
            if not endpoints:
                raise unavailable(
                    f"None of the endpoints the gateway allows for model `{_quote(model)}` is ready. Retry later.",
                    "no_eligible_endpoint",
                )
        scheduler = self.pickers.for_playgrounds(self.catalog.playgrounds_serving(base))
        session_header = self.headers.get(SESSION_HEADER)
        key = None
        if scheduler.needs_key:
            key = routing_key(document, session_header, model if adapter is not None else None)
        request = Request(base, endpoints, key, adapter, session_of(document, session_header))
        recognised = self.serving.recognised
        engine_of = self.catalog.engine_at(base, None if recognised is None else recognised.engine)
        decision = await scheduler.decide(request, engine_of)
        if decision.endpoint is None:
            _LOG.debug("no endpoint", model=base, reason=decision.reason)
            raise no_ready_endpoint(model)
        scheduler.pre_request(request, decision.endpoint)
        self.attempt = Attempt(scheduler, request, decision.endpoint)
        self.phase = Phase.ROUTED
        self.destination = ",".join(str(e) for e in decision.endpoints[: 1 + self.fallbacks])
        if self.serving.metrics is not None:
            self.serving.metrics.epp_decided(self.clock() - self._headers_at)
        return self.destination

    def _admit(self, body: bytes, document: dict[str, Any]) -> None:
        """The max-tokens cap, then the caller's key's limits, checked as the proxy checks them: an admitted request
        holds its share of them until the stream ends."""
        serving = self.serving
        asked = max_tokens_of(document)
        cap = serving.max_tokens_cap
        if cap is not None and asked is not None and asked[1] > cap:
            raise max_tokens_too_large(asked[0], asked[1], cap)
        policy = None if self.caller is None else self.caller.policy
        if policy is None or serving.limits is None:
            return
        reservation = reservation_of(body, document, serving.default_max_tokens_reservation)
        try:
            self.admission = serving.limits.admit(policy, reservation, document.get("stream") is True)
        except LimitReachedError as refusal:
            raise rate_limited(refusal.limit, refusal.retry_after, refusal.detail) from None

    async def _endpoints(self, base: str, name: str, adapter: Adapter | None) -> list[Endpoint]:
        """The ready endpoints of `base` (those holding `adapter`, when the request names one), held for as the
        proxy holds a request: scaling says whether one is coming (and wakes a sleeping model), then routing is
        waited on up to the bound of that case; a model no longer served meanwhile is 404 at once."""
        serving = self.serving
        holding = None if adapter is None else functools.partial(self.pickers.holds_adapter.holders, adapter)
        loop = asyncio.get_running_loop()
        endpoints = self.catalog.endpoints(base)
        if endpoints:
            if holding is None or (endpoints := holding(endpoints)):
                return endpoints
            # Ready replicas, none holding the adapter yet: the new ones of a rollout that adds it are coming.
            bound = serving.hold_timeout
            endpoints = await self._held(base, loop.time() + bound, holding)
            if not endpoints:
                raise not_ready_in_time(name, bound)
            return endpoints
        started = loop.time()
        coming = await self._replica_coming(base, name, started + serving.wake_timeout)
        bound = serving.wake_timeout if coming is Coming.WAKING else serving.hold_timeout
        endpoints = await self._held(base, started + bound, holding)
        if not endpoints and not self.catalog.serves(base):
            raise model_not_found(name, self.catalog.served_names())
        if not endpoints and coming is Coming.WAKING:
            raise wake_timeout(name, bound)
        if not endpoints:
            raise not_ready_in_time(name, bound)
        return endpoints

    async def _held(
        self, model: str, deadline: float, holding: Callable[[list[Endpoint]], list[Endpoint]] | None
    ) -> list[Endpoint]:
        metrics = self.serving.metrics
        if metrics is None:
            return await self.catalog.await_endpoints(model, deadline, holding)
        with metrics.held_of(model).track_inprogress():
            return await self.catalog.await_endpoints(model, deadline, holding)

    async def _replica_coming(self, model: str, name: str, deadline: float) -> Coming:
        """How a replica of `model` is coming (`Waker.wake`, which scales a sleeping model up); the proxy's refusal
        when none is, when the scale-up failed, or when the caller's key may not wake the model."""
        waker = self.serving.waker
        assert waker is not None, "Serving makes one"
        may_wake = self.caller is None or self.caller.may_wake
        try:
            async with asyncio.timeout_at(deadline):
                return await waker.wake(model, may_wake=may_wake)
        except WakeNotAllowedError:
            raise wake_not_allowed(name) from None
        except NotComingError as err:
            raise no_ready_endpoint(name, str(err)) from None
        except ScaleUpError as err:
            raise wake_failed(name, str(err)) from None
        except TimeoutError:
            raise wake_timeout(name, self.serving.wake_timeout) from None

    def _document(self, body: bytes | None) -> dict[str, Any]:
        if not body:
            return {}
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RefusalError(
                400, "We could not parse the JSON body of your request: send a JSON object.", "invalid_json"
            ) from None
        if not isinstance(document, dict):
            raise RefusalError(400, "The request body must be a JSON object.", "invalid_json")
        return document

"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, so OpenAI clients and SDKs
report the gateway's refusals the way they report OpenAI's (the `openai` SDK raises `NotFoundError`,
`AuthenticationError`, ... with `.code` and `.param` filled in).

Every answer the gateway itself makes (not one relayed from an engine) goes through here. Types follow
OpenAI: `invalid_request_error` for the client's mistakes (4xx), `server_error` for 5xx, but for 501
`unsupported_endpoint` (an endpoint the model's engine does not serve): `invalid_request_error`, since asking again
cannot help; the request must name another model. Messages may quote
what the client sent; JSON encoding makes that harmless, and a model name is checked before it is quoted.

A model that cannot answer is described to the client by its name and a reason class only (`Unready`: loading,
scaled to zero, no ready endpoint, adapter unavailable): the cluster's own account (Playgrounds in other
namespaces, their conditions, the API server's refusal) goes into the error's `detail`, which the server logs in
the request's line and never sends. The objects' conditions say the same to whoever may read them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import orjson
from aiohttp import web

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
# How many available models a 404 names before it says "and N more".
LISTED_MODELS = 20
# How much of something the client sent a message quotes.
QUOTED_CHARS = 120
# How much of the cluster's reason for a model not being ready the log line keeps (one pod finding is at most ~500).
DETAIL_CHARS = 1000


class Unready(enum.StrEnum):
    """Why a model cannot answer, as a client is told it."""

    LOADING = "loading"
    """Replicas starting: said as "is starting" by `not_ready_in_time` and `wake_timeout`."""
    SCALED_TO_ZERO = "scaled to zero"
    NO_READY_ENDPOINT = "no ready endpoint"
    ADAPTER_UNAVAILABLE = "adapter unavailable"


def _quote(text: str, limit: int = QUOTED_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class OpenAIError(Exception):
    """A gateway answer: the HTTP status and OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})
        self.close = close
        """Close the connection after answering: the rest of the request was not (and will not be) read."""
        self.detail = None if detail is None else _quote(detail, DETAIL_CHARS)
        """Why, for the gateway's log line only: never in the answer."""
        self.tenant: str | None = None
        """The tenant the refusal is counted against (`llmaz_gateway_tenant_rejections_total`), when known."""

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        resp = web.Response(
            status=self.status, body=orjson.dumps(self.body()), content_type="application/json", headers=self.headers
        )
        if self.close:
            resp.force_close()
        return resp


def invalid_request(message: str, code: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, code=code, param=param)


def missing_api_key() -> OpenAIError:
    return OpenAIError(
        401,
        "You didn't provide an API key. Send it in the Authorization header: `Authorization: Bearer <key>`.",
        code="missing_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


def invalid_api_key() -> OpenAIError:
    return OpenAIError(
        401, "Incorrect API key provided.", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


def expired_api_key(expires: object) -> OpenAIError:
    return OpenAIError(
        401,
        f"The API key provided expired at {expires}. Ask for a new one.",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
        detail="expired",
    )


def refused_api_key(reason: str) -> OpenAIError:
    """A key whose Secret has a bad value: refused whole; the reason (the Secret and field) goes to the log."""
    return OpenAIError(
        401,
        "The API key provided is not usable: its configuration is invalid. Ask the gateway's administrator, who "
        "finds the reason in the gateway's log.",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
        detail=reason,
    )


RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
RATE_LIMITS = {
    "requests": "requests per minute",
    "tokens": "tokens per minute",
    "streams": "concurrent streams",
}


def rate_limited(limit: str, retry_after: int, detail: str) -> OpenAIError:
    """429 as OpenAI sends it: `type` the kind of limit reached (`requests` or `tokens`; the gateway's concurrent
    streams count as `requests`), `code` `rate_limit_exceeded`, and when to retry."""
    kind = "tokens" if limit == "tokens" else "requests"
    return OpenAIError(
        429,
        f"Rate limit reached for this API key on {RATE_LIMITS.get(limit, limit)}. Please try again in {retry_after}s.",
        type=kind,
        code=RATE_LIMIT_EXCEEDED,
        headers={"Retry-After": str(retry_after)},
        detail=detail,
    )


def model_saturated(model: str, why: str, retry_after: int, detail: str) -> OpenAIError:
    """429 for a request flow control shed: the model's engines are saturated (`why` says how it was shed), said
    as OpenAI says a rate limit (`rate_limit_exceeded`, `Retry-After`)."""
    return OpenAIError(
        429,
        f"The model `{model}` is saturated: {why}. Please try again in {retry_after}s.",
        type="requests",
        code=RATE_LIMIT_EXCEEDED,
        headers={"Retry-After": str(retry_after)},
        detail=detail,
    )


def invalid_priority(header: str, problem: str) -> OpenAIError:
    return invalid_request(f"The {header} header {problem}.", "invalid_priority", header)


def max_tokens_too_large(param: str, asked: int, cap: int) -> OpenAIError:
    return invalid_request(
        f"`{param}` is {asked}, above this gateway's limit of {cap} tokens. Ask for at most {cap}.",
        "max_tokens_too_large",
        param,
    )


def wake_not_allowed(model: str) -> OpenAIError:
    """A key with `may-wake: "false"` asked for a sleeping model."""
    message = (
        f"The model `{model}` is {Unready.SCALED_TO_ZERO}, and this API key may not wake it. Retry once another"
        " client has woken it."
    )
    return _retry_later(503, message, "model_sleeping")


def model_not_found(model: str, available: Iterable[str]) -> OpenAIError:
    names = list(available)
    listed = ", ".join(names[:LISTED_MODELS]) or "none"
    if len(names) > LISTED_MODELS:
        listed += f" and {len(names) - LISTED_MODELS} more"
    return OpenAIError(
        404,
        f"The model `{_quote(model)}` does not exist. Available models: {listed}.",
        code="model_not_found",
        param="model",
    )


def unsupported_endpoint(model: str, path: str) -> OpenAIError:
    return OpenAIError(
        501,
        f"The model `{_quote(model)}` does not serve {_quote(path)}: its engine does not have that endpoint, or was"
        " not started with the flag it needs. GET /v1/models lists each model's capabilities.",
        code="unsupported_endpoint",
    )


def not_found(path: str) -> OpenAIError:
    return OpenAIError(404, f"Unknown request URL: {_quote(path)}.", code="unknown_url")


def method_not_allowed(method: str, path: str) -> OpenAIError:
    return OpenAIError(405, f"Method {_quote(method)} is not allowed on {_quote(path)}.", code="method_not_allowed")


def request_timeout() -> OpenAIError:
    return OpenAIError(408, "The request body was not received in time.", code="request_timeout", close=True)


def request_too_large(limit: int) -> OpenAIError:
    return OpenAIError(413, f"The request body is larger than {limit} bytes.", code="request_too_large", close=True)


def bad_gateway(model: str) -> OpenAIError:
    return OpenAIError(
        502, f"No endpoint of model `{model}` could be reached.", type=SERVER_ERROR, code="upstream_unreachable"
    )


def no_ready_endpoint(model: str, detail: str | None = None, reason: Unready | None = None) -> OpenAIError:
    """No ready endpoint: none left to retry on (`detail` None), or none coming (`detail` says why, to the log;
    `reason`, when given, is the class the client is told)."""
    if detail is None:
        message = f"The model `{model}` has no ready endpoint; it may be starting or scaled to zero. Retry later."
    else:
        message = f"The model `{model}` has no ready endpoint, and none is coming"
        message += f" ({reason})." if reason is not None else "."
    return _retry_later(503, message, "model_not_ready", detail)


def not_ready_in_time(model: str, seconds: float) -> OpenAIError:
    message = f"The model `{model}` is starting but had no ready endpoint within {seconds:.0f} s. Retry later."
    return _retry_later(503, message, "model_not_ready")


def wake_timeout(model: str, seconds: float) -> OpenAIError:
    message = (
        f"The model `{model}` was scaled up from zero but had no ready endpoint within {seconds:.0f} s. Retry later."
    )
    return _retry_later(504, message, "model_wake_timeout")


def wake_failed(model: str, detail: str) -> OpenAIError:
    message = f"The model `{model}` is {Unready.SCALED_TO_ZERO} and could not be scaled up. Retry later."
    return _retry_later(503, message, "model_wake_failed", detail)


def _retry_later(status: int, message: str, code: str, detail: str | None = None) -> OpenAIError:
    """A model that cannot answer now but may soon: clients are told when to retry."""
    return OpenAIError(status, message, type=SERVER_ERROR, code=code, headers={"Retry-After": "5"}, detail=detail)


def not_ready() -> OpenAIError:
    return OpenAIError(503, "The gateway is starting: its caches are not synced yet.", type=SERVER_ERROR)


def upstream_timeout(model: str) -> OpenAIError:
    return OpenAIError(
        504, f"The endpoint of model `{model}` did not answer in time.", type=SERVER_ERROR, code="upstream_timeout"
    )


def internal_error() -> OpenAIError:
    return OpenAIError(500, "The gateway failed to handle the request.", type=SERVER_ERROR, code="internal_error")


def from_http_exception(exc: web.HTTPException, method: str, path: str) -> OpenAIError:
    """aiohttp's own refusals (unknown path, wrong method, ...) in OpenAI's shape."""
    if exc.status == 404:
        return not_found(path)
    if exc.status == 405:
        return method_not_allowed(method, path)
    kind = SERVER_ERROR if exc.status >= 500 else INVALID_REQUEST
    return OpenAIError(exc.status, exc.reason or "Request failed.", type=kind)

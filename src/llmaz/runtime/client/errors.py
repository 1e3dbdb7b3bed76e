"""Typed API errors, mapped in one place from HTTP responses and Status objects.

Invariant: every failure the client reports is an `ApiError`; callers branch on the class (or the `is_*`
predicates), never on message text. `error_from_status` is the only place that decides the class, and it
prefers the Status `reason` over the HTTP code, as the API conventions say clients should.

The names follow the Kubernetes Status reasons (NotFound, Conflict, ...) rather than an `...Error` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Markers in Status messages that classify an error when its reason alone is ambiguous.
_TOO_OLD_RV = "too old resource version"
_TOO_LARGE_RV = "Too large resource version"


@dataclass(frozen=True, slots=True)
class Cause:
    """One field-level reason of an Invalid (or other) Status: `field` is a path such as "spec.replicas"."""

    field: str
    message: str
    reason: str = ""


class ApiError(Exception):
    """A request the API server refused, or could not be reached for (status 0)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = details or {}
        # Seconds the server asked us to wait before retrying (Retry-After / details.retryAfterSeconds).
        self.retry_after = retry_after

    @property
    def causes(self) -> list[Cause]:
        return [
            Cause(field=c.get("field", ""), message=c.get("message", ""), reason=c.get("reason", ""))
            for c in self.details.get("causes") or []
        ]


class BadRequest(ApiError):  # noqa: N818
    """400: malformed request (wrong patch type for the resource, bad selector, ...)."""


class Unauthorized(ApiError):  # noqa: N818
    """401: no or bad credentials."""


class Forbidden(ApiError):  # noqa: N818
    """403: RBAC denied the request, or the namespace is terminating."""


class NotFound(ApiError):  # noqa: N818
    """404: the object (or its namespace, or the resource type) does not exist."""


class AlreadyExists(ApiError):  # noqa: N818
    """409 with reason AlreadyExists: create of a name that is taken."""


class Conflict(ApiError):  # noqa: N818
    """409: the resourceVersion sent is stale, or a server-side apply field conflict."""


class Expired(ApiError):  # noqa: N818
    """410 / reason Expired or Gone: the resourceVersion (or continue token) is older than etcd's history."""


Gone = Expired


class Invalid(ApiError):  # noqa: N818
    """422: the object failed validation; `causes` name the fields."""


class TooManyRequests(ApiError):  # noqa: N818
    """429: throttled by API Priority and Fairness (or the server's inflight limit); see `retry_after`."""


class ServerError(ApiError):
    """5xx: the server failed (internal error, timeout, unavailable)."""


class ApiConnectionError(ApiError):
    """The server could not be reached or the connection broke mid-response (status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "ConnectionFailed", message)


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Expired": Expired,
    "Gone": Expired,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": ServerError,
    "ServiceUnavailable": ServerError,
    "Timeout": ServerError,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Expired,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(status: int, body: Any, retry_after_header: str | None = None) -> ApiError:
    """Map an HTTP status code and its decoded body (a Status object, or anything else) to a typed error."""
    st: dict[str, Any] = body if isinstance(body, dict) and body.get("kind") == "Status" else {}
    code = int(st.get("code") or status)
    reason = str(st.get("reason") or "")
    message = str(st.get("message") or (body if isinstance(body, str) else "") or f"HTTP {code}")
    details = st.get("details") if isinstance(st.get("details"), dict) else {}
    cls = _classify(code, reason, message)
    return cls(code, reason or _default_reason(code), message, details, _retry_after(st, retry_after_header))


def _classify(code: int, reason: str, message: str) -> type[ApiError]:
    if _TOO_OLD_RV in message:
        return Expired
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    if code in _BY_CODE:
        return _BY_CODE[code]
    return ServerError if code >= 500 else ApiError


def _default_reason(code: int) -> str:
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls.__name__
    return "InternalError" if code >= 500 else "Unknown"


def _retry_after(status: dict[str, Any], header: str | None) -> float | None:
    details = status.get("details") or {}
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    if seconds is None and header:
        try:
            seconds = float(header)
        except ValueError:
            seconds = None  # an HTTP-date; the client falls back to its own backoff
    return float(seconds) if seconds is not None else None


def ignore_not_found(exc: BaseException) -> None:
    """Re-raise `exc` unless it is a NotFound. Use inside `except ApiError as e: ignore_not_found(e)`."""
    if not isinstance(exc, NotFound):
        raise exc


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, NotFound)


def is_already_exists(exc: BaseException) -> bool:
    return isinstance(exc, AlreadyExists)


def is_conflict(exc: BaseException) -> bool:
    """True for a stale-resourceVersion or apply conflict; False for AlreadyExists (also a 409)."""
    return isinstance(exc, Conflict)


def is_invalid(exc: BaseException) -> bool:
    return isinstance(exc, Invalid)


def is_expired(exc: BaseException) -> bool:
    return isinstance(exc, Expired)


def is_too_large_resource_version(exc: BaseException) -> bool:
    """The server's watch cache has not caught up with the requested resourceVersion yet."""
    if not isinstance(exc, ApiError):
        return False
    if _TOO_LARGE_RV in exc.message:
        return True
    return any(c.reason == "ResourceVersionTooLarge" for c in exc.causes)


def is_too_many_requests(exc: BaseException) -> bool:
    return isinstance(exc, TooManyRequests)


def is_forbidden(exc: BaseException) -> bool:
    return isinstance(exc, Forbidden)


def is_server_error(exc: BaseException) -> bool:
    return isinstance(exc, ServerError)

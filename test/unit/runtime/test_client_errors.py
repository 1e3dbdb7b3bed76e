"""The one mapping from HTTP responses / Status objects to typed errors, and the helpers around it."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.runtime.client import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_from_status,
    ignore_not_found,
    is_conflict,
    is_expired,
    is_too_large_resource_version,
)


def status(code: int, reason: str, message: str = "m", **details: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "body", "expected"),
    [
        (400, status(400, "BadRequest"), BadRequest),
        (401, status(401, "Unauthorized"), Unauthorized),
        (403, status(403, "Forbidden"), Forbidden),
        (404, status(404, "NotFound"), NotFound),
        (404, "404 page not found", NotFound),
        (409, status(409, "AlreadyExists"), AlreadyExists),
        (409, status(409, "Conflict"), Conflict),
        (410, status(410, "Expired"), Expired),
        (410, status(410, "Gone"), Expired),
        (200, status(410, "", "too old resource version: 5 (10)"), Expired),
        (500, status(500, "InternalError", "too old resource version: 5 (10)"), Expired),
        (422, status(422, "Invalid"), Invalid),
        (429, status(429, "TooManyRequests"), TooManyRequests),
        (429, b"", TooManyRequests),
        (500, status(500, "InternalError"), ServerError),
        (503, status(503, "ServiceUnavailable"), ServerError),
        (504, status(504, "Timeout"), ServerError),
        (502, "bad gateway", ServerError),
        (405, status(405, "MethodNotAllowed"), ApiError),
    ],
)
def test_each_status_maps_to_its_typed_error(code: int, body: Any, expected: type[ApiError]) -> None:
    err = error_from_status(code, body)
    assert type(err) is expected


def test_the_status_reason_wins_over_the_http_code() -> None:
    err = error_from_status(409, status(409, "AlreadyExists", 'pods "a" already exists', name="a"))
    assert isinstance(err, AlreadyExists)
    assert not is_conflict(err)
    assert err.status == 409
    assert err.reason == "AlreadyExists"
    assert err.message == 'pods "a" already exists'
    assert err.details == {"name": "a"}


def test_gone_is_the_same_class_as_expired() -> None:
    assert Gone is Expired
    assert is_expired(error_from_status(410, {}))


def test_invalid_carries_its_field_causes() -> None:
    body = status(
        422,
        "Invalid",
        causes=[
            {"reason": "FieldValueInvalid", "message": "must be >= 0", "field": "spec.replicas"},
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.template"},
        ],
    )
    err = error_from_status(422, body)
    assert isinstance(err, Invalid)
    assert [(c.field, c.message) for c in err.causes] == [
        ("spec.replicas", "must be >= 0"),
        ("spec.template", "Required value"),
    ]


def test_too_many_requests_takes_retry_after_from_details_then_header() -> None:
    from_details = error_from_status(429, status(429, "TooManyRequests", retryAfterSeconds=3), "7")
    from_header = error_from_status(429, status(429, "TooManyRequests"), "7")
    http_date = error_from_status(429, status(429, "TooManyRequests"), "Wed, 21 Oct 2015 07:28:00 GMT")
    assert (from_details.retry_after, from_header.retry_after, http_date.retry_after) == (3.0, 7.0, None)


def test_a_body_without_a_status_gets_a_message_and_a_default_reason() -> None:
    err = error_from_status(404, "404 page not found")
    assert (err.reason, err.message) == ("NotFound", "404 page not found")
    empty = error_from_status(500, {})
    assert (empty.reason, empty.message) == ("InternalError", "HTTP 500")


def test_too_large_resource_version_is_recognised_by_cause_or_message() -> None:
    by_cause = error_from_status(504, status(504, "Timeout", "x", causes=[{"reason": "ResourceVersionTooLarge"}]))
    by_message = error_from_status(504, status(504, "Timeout", "Too large resource version: 9, current: 5"))
    assert is_too_large_resource_version(by_cause)
    assert is_too_large_resource_version(by_message)
    assert not is_too_large_resource_version(error_from_status(504, status(504, "Timeout")))


def test_ignore_not_found_swallows_only_not_found() -> None:
    ignore_not_found(error_from_status(404, {}))
    with pytest.raises(Conflict):
        ignore_not_found(error_from_status(409, {}))

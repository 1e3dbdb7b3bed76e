"""Every gateway answer is an OpenAI error object with the right status, type, code and param."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web

from llmaz.gateway.proxy import errors
from llmaz.gateway.proxy.errors import OpenAIError


def shape(error: OpenAIError) -> tuple[int, dict[str, object]]:
    resp = error.response()
    assert resp.content_type == "application/json"
    assert isinstance(resp.body, bytes)
    body = orjson.loads(resp.body)
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return resp.status, body["error"]


@pytest.mark.parametrize(
    ("error", "status", "type_", "code"),
    [
        (errors.invalid_request("bad", "invalid_json"), 400, "invalid_request_error", "invalid_json"),
        (errors.missing_api_key(), 401, "invalid_request_error", "missing_api_key"),
        (errors.invalid_api_key(), 401, "invalid_request_error", "invalid_api_key"),
        (errors.model_not_found("x", ["a"]), 404, "invalid_request_error", "model_not_found"),
        (errors.not_found("/nope"), 404, "invalid_request_error", "unknown_url"),
        (errors.method_not_allowed("GET", "/v1/completions"), 405, "invalid_request_error", "method_not_allowed"),
        (errors.request_timeout(), 408, "invalid_request_error", "request_timeout"),
        (errors.request_too_large(10), 413, "invalid_request_error", "request_too_large"),
        (errors.internal_error(), 500, "server_error", "internal_error"),
        (errors.bad_gateway("m"), 502, "server_error", "upstream_unreachable"),
        (errors.no_ready_endpoint("m"), 503, "server_error", "model_not_ready"),
        (errors.upstream_timeout("m"), 504, "server_error", "upstream_timeout"),
    ],
)
def test_each_error_has_openais_shape_status_type_and_code(
    error: OpenAIError, status: int, type_: str, code: str
) -> None:
    got_status, body = shape(error)
    assert (got_status, body["type"], body["code"]) == (status, type_, code)


def test_model_not_found_names_the_model_and_lists_the_available_ones_up_to_a_bound() -> None:
    _, body = shape(errors.model_not_found("gpt-4", ["a", "b"]))
    assert body["param"] == "model"
    assert body["message"] == "The model `gpt-4` does not exist. Available models: a, b."
    _, body = shape(errors.model_not_found("x", []))
    assert "Available models: none." in str(body["message"])
    _, body = shape(errors.model_not_found("y" * 1000, [f"m{i:02}" for i in range(25)]))
    assert "m19 and 5 more." in str(body["message"])
    assert len(str(body["message"])) < 600


def test_refusals_that_leave_the_body_unread_close_the_connection_and_401s_ask_for_a_bearer_token() -> None:
    assert errors.request_too_large(1).response().keep_alive is False
    assert errors.request_timeout().response().keep_alive is False
    assert errors.invalid_api_key().response().headers["WWW-Authenticate"] == "Bearer"
    assert errors.no_ready_endpoint("m").response().headers["Retry-After"] == "5"


def test_aiohttp_refusals_are_mapped_to_openai_errors() -> None:
    assert shape(errors.from_http_exception(web.HTTPNotFound(), "GET", "/x"))[1]["code"] == "unknown_url"
    status, body = shape(errors.from_http_exception(web.HTTPMethodNotAllowed("GET", ["POST"]), "GET", "/v1/x"))
    assert (status, body["code"]) == (405, "method_not_allowed")
    status, body = shape(errors.from_http_exception(web.HTTPServiceUnavailable(), "GET", "/x"))
    assert (status, body["type"]) == (503, "server_error")

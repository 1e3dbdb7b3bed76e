"""Reading and checking an inference request before anything is sent upstream.

Invariants:
- At most `limit` bytes of a body are ever buffered: a Content-Length over the limit is refused before
  reading (413), and a body that grows past it while being read (chunked) is refused as soon as it does.
  Both close the connection, so the unread rest is never drained.
- The whole body must arrive within `time_limit` seconds (408, connection closed): a client trickling its body
  cannot hold a connection and a buffer for long.
- The body is forwarded byte for byte as received; parsing only decides where it goes.
- The model comes from the body's `model`, or from the `x-ai-eg-model` header (Envoy AI Gateway's routing
  header) when the body has none; when both are given they must agree (400 `model_mismatch`), so routing,
  metrics and the engine never disagree about the model.
- A model name is a non-empty printable string of at most MAX_MODEL_CHARS (the longest OpenModel name):
  no CR, LF or any other control, format or separator character but the space. Anything else is a 400 and is
  never forwarded, used as a metric label or logged.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from llmaz.gateway.proxy import errors

MODEL_HEADER = "x-ai-eg-model"
MAX_MODEL_CHARS = 253
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    body: bytes
    model: str
    stream: bool
    document: dict[str, Any]
    """The parsed body, read-only: routing reads its prompt (`routing.prefix`) without parsing it again."""


async def read_body(request: web.BaseRequest, limit: int, time_limit: float) -> bytes:
    """The request body, at most `limit` bytes, received within `time_limit` seconds (see the invariants)."""
    if request.content_length is not None and request.content_length > limit:
        raise errors.request_too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(time_limit):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > limit:
                    raise errors.request_too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise errors.request_timeout() from None
    except web.RequestPayloadError:
        # Broken framing (chunked encoding, a truncated or undecodable compressed body): nothing more to read.
        raise errors.OpenAIError(400, "The request body is malformed.", code="invalid_body", close=True) from None
    return b"".join(chunks)


def check_model_name(name: str, param: str) -> str:
    if not name:
        raise errors.invalid_request(f"`{param}` must not be empty.", "invalid_model", param)
    if len(name) > MAX_MODEL_CHARS:
        raise errors.invalid_request(f"`{param}` is longer than {MAX_MODEL_CHARS} characters.", "invalid_model", param)
    if not name.isprintable():
        raise errors.invalid_request(f"`{param}` contains control or non-printable characters.", "invalid_model", param)
    return name


def parse(body: bytes, header_model: str | None) -> InferenceRequest:
    """Decide the model of an inference request (see the invariants); raises OpenAIError (400)."""
    try:
        document: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.invalid_request(
            "We could not parse the JSON body of your request. The body must be a JSON object (UTF-8).",
            "invalid_json",
        ) from None
    if not isinstance(document, dict):
        raise errors.invalid_request("The request body must be a JSON object.", "invalid_body")
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise errors.invalid_request("`model` must be a string.", "invalid_model", "model")
    if model is not None:
        check_model_name(model, "model")
    if header_model is not None:
        check_model_name(header_model, MODEL_HEADER)
        if model is not None and model != header_model:
            raise errors.invalid_request(
                f"The `model` in the body and the `{MODEL_HEADER}` header name different models.",
                "model_mismatch",
                "model",
            )
    chosen = model if model is not None else header_model
    if chosen is None:
        raise errors.invalid_request("You must provide a model parameter.", "missing_model", "model")
    return InferenceRequest(body, chosen, document.get("stream") is True, document)

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
- An audio upload (`multipart/form-data`) names its model in the form field `model` (`x-ai-eg-model` as above).
  The buffered body is scanned for its parts' headers only: the `model` and `stream` fields are decoded, every
  other part (the audio file) is skipped unread, and no part is copied. A form without a `model` field, a part
  whose headers exceed MAX_PART_HEADER_BYTES or a body that is not a form is a 400 naming the field or the format.
- A model name is a non-empty printable string of at most MAX_MODEL_CHARS (the longest OpenModel name):
  no CR, LF or any other control, format or separator character but the space. Anything else is a 400 and is
  never forwarded, used as a metric label or logged.
"""

from __future__ import annotations

import asyncio
import email.message
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from llmaz.gateway.proxy import errors

MODEL_HEADER = "x-ai-eg-model"
MAX_MODEL_CHARS = 253
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
MULTIPART_FORM = "multipart/form-data"
MODEL_FIELD = "model"
STREAM_FIELD = "stream"
# The most a part's headers may take (a Content-Disposition and a Content-Type need a few hundred bytes).
MAX_PART_HEADER_BYTES = 8 * 1024
_CRLF = b"\r\n"
MAX_BOUNDARY_CHARS = 70  # RFC 2046


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


def _chosen_model(model: str | None, header_model: str | None, param: str) -> str:
    """The model a request names: its own (`model`, from the field `param`) or the header's, which must agree."""
    if model is not None:
        check_model_name(model, param)
    if header_model is not None:
        check_model_name(header_model, MODEL_HEADER)
        if model is not None and model != header_model:
            raise errors.invalid_request(
                f"The `{param}` in the body and the `{MODEL_HEADER}` header name different models.",
                "model_mismatch",
                param,
            )
    chosen = model if model is not None else header_model
    if chosen is None:
        raise errors.invalid_request("You must provide a model parameter.", "missing_model", param)
    return chosen


def _header_param(value: str, header: str, param: str) -> str | None:
    """A parameter of a header value (`multipart/form-data; boundary=...`, `form-data; name="model"`)."""
    message = email.message.Message()
    message[header] = value
    found = message.get_param(param, header=header)
    return found if isinstance(found, str) else None


def _form_error(message: str) -> errors.OpenAIError:
    return errors.invalid_request(message, "invalid_body")


def _form_fields(body: bytes, boundary: str, wanted: frozenset[str]) -> dict[str, bytes]:
    """The values of the form fields named in `wanted` (the first of each), read without copying any other part."""
    delimiter = b"--" + boundary.encode("ascii")
    found: dict[str, bytes] = {}
    start = body.find(delimiter)
    if start < 0 or (start > 0 and body[start - 2 : start] != _CRLF):
        raise _form_error(f"The request body is not a {MULTIPART_FORM} body with the boundary of its Content-Type.")
    position = start + len(delimiter)
    while body[position : position + 2] != b"--":  # the close delimiter ends the form
        line_end = body.find(_CRLF, position)
        if line_end < 0:
            raise _form_error(f"The {MULTIPART_FORM} body ends inside a part: it has no closing boundary.")
        headers_end = body.find(_CRLF + _CRLF, line_end, line_end + MAX_PART_HEADER_BYTES + 4)
        if headers_end < 0:
            raise _form_error(
                f"A part of the {MULTIPART_FORM} body has no end of headers within {MAX_PART_HEADER_BYTES} bytes."
            )
        content_start = headers_end + 4
        content_end = body.find(_CRLF + delimiter, content_start)
        if content_end < 0:
            raise _form_error(f"The {MULTIPART_FORM} body ends inside a part: it has no closing boundary.")
        name = _part_name(body[line_end + 2 : headers_end])
        if name in wanted and name not in found:
            found[name] = body[content_start:content_end]
            if len(found) == len(wanted):
                break
        position = content_end + 2 + len(delimiter)
    return found


def _part_name(headers: bytes) -> str | None:
    """The form field name in a part's headers (its Content-Disposition's `name`), or None."""
    for line in headers.decode("latin-1").split("\r\n"):
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-disposition":
            return _header_param(value.strip(), "content-disposition", "name")
    return None


def parse_form(body: bytes, content_type: str | None, header_model: str | None) -> InferenceRequest:
    """Decide the model of an audio upload, a `multipart/form-data` body (see the invariants); raises OpenAIError
    (400)."""
    message = email.message.Message()
    message["content-type"] = content_type or ""
    if message.get_content_type() != MULTIPART_FORM:
        raise _form_error(
            f"This endpoint takes a {MULTIPART_FORM} upload (Content-Type), with the audio in the field `file` and"
            f" the model in the field `{MODEL_FIELD}`."
        )
    boundary = message.get_param("boundary", header="content-type")
    if not isinstance(boundary, str) or not boundary:
        raise _form_error(f"The Content-Type `{MULTIPART_FORM}` has no `boundary` parameter.")
    if len(boundary) > MAX_BOUNDARY_CHARS or not boundary.isascii() or not boundary.isprintable():
        raise _form_error(
            f"The `boundary` of the Content-Type must be 1 to {MAX_BOUNDARY_CHARS} printable ASCII characters."
        )
    fields = _form_fields(body, boundary, frozenset({MODEL_FIELD, STREAM_FIELD}))
    model: str | None = None
    if (raw := fields.get(MODEL_FIELD)) is not None:
        try:
            model = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise errors.invalid_request("`model` is not UTF-8 text.", "invalid_model", MODEL_FIELD) from None
    elif header_model is None:
        raise errors.invalid_request(
            f"The form has no `{MODEL_FIELD}` field: send the model's name as the form field `{MODEL_FIELD}`.",
            "missing_model",
            MODEL_FIELD,
        )
    chosen = _chosen_model(model, header_model, MODEL_FIELD)
    stream = fields.get(STREAM_FIELD, b"").strip().lower() == b"true"
    return InferenceRequest(body, chosen, stream, {})


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
    return InferenceRequest(body, _chosen_model(model, header_model, "model"), document.get("stream") is True, document)

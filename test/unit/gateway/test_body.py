"""Request checking before anything goes upstream: JSON object, model name, size and time bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmaz.gateway.proxy import body
from llmaz.gateway.proxy.errors import OpenAIError
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, engines, running_gateway


def refusal(raw: bytes, header: str | None = None) -> tuple[int, str | None, str | None]:
    with pytest.raises(OpenAIError) as caught:
        body.parse(raw, header)
    return caught.value.status, caught.value.code, caught.value.param


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b"", "invalid_json", None),
        (b"{", "invalid_json", None),
        (b'{"model": "m",}', "invalid_json", None),
        (b"\xff\xfe{}", "invalid_json", None),
        (b"[1, 2]", "invalid_body", None),
        (b'"model"', "invalid_body", None),
        (b"null", "invalid_body", None),
        (b"{}", "missing_model", "model"),
        (b'{"model": null}', "missing_model", "model"),
        (b'{"model": 3}', "invalid_model", "model"),
        (b'{"model": ["m"]}', "invalid_model", "model"),
        (b'{"model": {"name": "m"}}', "invalid_model", "model"),
        (b'{"model": true}', "invalid_model", "model"),
        (b'{"model": ""}', "invalid_model", "model"),
        (b'{"model": "m\\r\\nX-Injected: 1"}', "invalid_model", "model"),
        (b'{"model": "m\\n"}', "invalid_model", "model"),
        (b'{"model": "m\\u0000"}', "invalid_model", "model"),
        (b'{"model": "m\\u007f"}', "invalid_model", "model"),
        (b'{"model": "m\\u2028"}', "invalid_model", "model"),
        (b'{"model": "m\\u200b"}', "invalid_model", "model"),
        (orjson.dumps({"model": "m" * 254}), "invalid_model", "model"),
    ],
)
def test_bodies_that_are_not_a_json_object_with_a_printable_model_name_are_400(
    raw: bytes, code: str, param: str | None
) -> None:
    assert refusal(raw) == (400, code, param)


def test_the_model_and_stream_flag_are_read_and_the_body_is_kept_byte_for_byte() -> None:
    raw = b'{"model": "llama 3", "stream": true, "messages": []}'
    document = {"model": "llama 3", "stream": True, "messages": []}
    assert body.parse(raw, None) == body.InferenceRequest(raw, "llama 3", True, document)
    assert body.parse(b'{"model": "m", "stream": "yes"}', None).stream is False


@pytest.mark.parametrize(
    ("raw", "header", "model"),
    [
        (b'{"model": "m"}', None, "m"),
        (b"{}", "h", "h"),
        (b'{"model": "m"}', "m", "m"),
    ],
)
def test_the_model_header_routes_when_the_body_names_no_model_or_the_same_one(
    raw: bytes, header: str, model: str
) -> None:
    assert body.parse(raw, header).model == model


def test_a_model_header_that_disagrees_with_the_body_or_is_not_printable_is_400() -> None:
    assert refusal(b'{"model": "m"}', "n") == (400, "model_mismatch", "model")
    assert refusal(b"{}", "h\x01") == (400, "invalid_model", "x-ai-eg-model")
    assert refusal(b"{}", "") == (400, "invalid_model", "x-ai-eg-model")


async def post_raw(port: int, head: bytes, payload: bytes = b"") -> tuple[int, dict[str, Any], bool]:
    """Send bytes on a fresh connection; (status, JSON body, whether the server then closed the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + payload)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), WAIT)
        headers: dict[str, str] = {}
        while (line := await asyncio.wait_for(reader.readline(), WAIT)) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        content = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT)
        closed = await asyncio.wait_for(reader.read(1), WAIT) == b""
        return int(status_line.split()[1]), orjson.loads(content), closed
    finally:
        writer.close()


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"


async def test_a_content_length_over_the_limit_is_413_before_the_body_is_read() -> None:
    async with running_gateway(Cluster().synced(), GatewayOptions(max_body_bytes=1024)) as gw:
        assert gw.gateway.port is not None
        # Nothing of the announced body is sent: the answer must not wait for it.
        status, answer, closed = await post_raw(gw.gateway.port, HEAD + b"Content-Length: 1025\r\n\r\n")
        assert (status, answer["error"]["code"], closed) == (413, "request_too_large", True)


async def test_a_chunked_body_growing_past_the_limit_is_413() -> None:
    async with running_gateway(Cluster().synced(), GatewayOptions(max_body_bytes=1024)) as gw:
        assert gw.gateway.port is not None
        chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
        status, answer, closed = await post_raw(
            gw.gateway.port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n", chunk * 2
        )
        assert (status, answer["error"]["code"], closed) == (413, "request_too_large", True)


async def test_a_body_at_the_limit_is_accepted() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, GatewayOptions(max_body_bytes=1024)) as gw:
            raw = orjson.dumps({"model": "m", "pad": ""})
            raw = raw[:-2] + b"x" * (1024 - len(raw)) + b'"}'
            assert len(raw) == 1024
            status, _ = await gw.post("/v1/chat/completions", raw)
            assert status == 200
            assert engine.requests[0].body == raw


async def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_is_closed() -> None:
    async with running_gateway(Cluster().synced(), GatewayOptions(body_timeout=0.2)) as gw:
        assert gw.gateway.port is not None
        status, answer, closed = await post_raw(gw.gateway.port, HEAD + b"Content-Length: 100\r\n\r\n", b'{"model"')
        assert (status, answer["error"]["code"], closed) == (408, "request_timeout", True)


async def test_a_body_cut_short_by_the_client_is_not_forwarded() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            assert gw.gateway.port is not None
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.gateway.port)
            writer.write(HEAD + b"Content-Length: 100\r\n\r\n" + b'{"model": "m"}')
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            assert await asyncio.wait_for(reader.read(), WAIT) == b""
            # The gateway saw the request end (one answered request), and the engine none of it.
            await eventually(lambda: gw.sample("llmaz_gateway_requests_total", model="", code="499"), WAIT)
            assert engine.requests == []


FORM = "multipart/form-data; boundary=b"


def form(*parts: bytes) -> bytes:
    return b"".join(b"--b\r\n" + part + b"\r\n" for part in parts) + b"--b--\r\n"


def field(name: str, value: bytes, extra: bytes = b"") -> bytes:
    return b'Content-Disposition: form-data; name="' + name.encode() + b'"' + extra + b"\r\n\r\n" + value


def test_a_forms_model_and_stream_fields_are_read_and_the_body_kept_as_it_came() -> None:
    raw = b"preamble\r\n" + form(
        field("file", b"\r\n--c\r\n" * 3, b'; filename="model"\r\nContent-Type: audio/wav'),
        field("stream", b"true"),
        field("model", b"whisper"),
        field("model", b"second"),
    )
    parsed = body.parse_form(raw, FORM, None)
    assert (parsed.model, parsed.stream, parsed.body) == ("whisper", True, raw)


@pytest.mark.parametrize(
    ("raw", "content_type", "code", "param"),
    [
        (form(field("file", b"x")), FORM, "missing_model", "model"),
        (form(field("model", b"")), FORM, "invalid_model", "model"),
        (form(field("model", b"a\nb")), FORM, "invalid_model", "model"),
        (form(field("model", b"\xff")), FORM, "invalid_model", "model"),
        (form(field("model", b"m")), "multipart/form-data; boundary=\u00e9\u4e2d", "invalid_body", None),
        (form(field("model", b"m")), "multipart/form-data; boundary=" + "b" * 71, "invalid_body", None),
        (form(field("model", b"m")), "text/plain", "invalid_body", None),
        (form(field("model", b"m")), "", "invalid_body", None),
    ],
)
def test_a_form_that_names_no_usable_model_is_refused_naming_why(
    raw: bytes, content_type: str, code: str, param: str | None
) -> None:
    with pytest.raises(OpenAIError) as caught:
        body.parse_form(raw, content_type, None)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, code, param)


@given(raw=st.binary(max_size=300), content_type=st.sampled_from([FORM, "multipart/form-data; boundary=\r", "x/y"]))
@settings(deadline=None)
def test_any_body_is_read_as_a_form_or_refused_with_a_400(raw: bytes, content_type: str) -> None:
    status = 200
    try:
        body.parse_form(raw, content_type, None)
    except OpenAIError as refused:
        status = refused.status
    assert status in (200, 400)

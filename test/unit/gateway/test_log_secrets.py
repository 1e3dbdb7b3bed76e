"""No request header value reaches the gateway's log: a client's credentials, forwarded to the engine when the
gateway checks no API keys, stay out of every line, however the request fails.

The log is captured as the gateway writes it in the cluster (JSON, tracebacks formatted), so a value hidden in an
exception's repr or in a formatted stack would be found.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
import structlog

from llmaz.gateway.proxy.forwarding import REDACTED, sanitised_error
from llmaz.gateway.routing.routes import Endpoint

from .support import WAIT, Cluster, running_gateway

CHAT = "/v1/chat/completions"
SECRET = "secret-xyz"
CREDENTIALS = {"Authorization": f"Bearer {SECRET}", "Api-Key": f"key-{SECRET}", "Cookie": f"session={SECRET}"}


@contextlib.contextmanager
def rendered_log() -> Iterator[io.StringIO]:
    """Every line logged inside, rendered as the cluster's JSON log renders it."""
    saved = structlog.get_config()
    out = io.StringIO()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    try:
        yield out
    finally:
        structlog.configure(**saved)


@contextlib.asynccontextmanager
async def garbling_engine() -> AsyncIterator[Endpoint]:
    """An engine that answers every request with a status line HTTP cannot parse."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 abc garbage\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield Endpoint("127.0.0.1", server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def test_an_engine_error_quoting_the_forwarded_authorization_logs_no_credential() -> None:
    async with garbling_engine() as engine:
        cluster = Cluster().synced()
        cluster.serve("m", engine)
        with rendered_log() as log:
            async with running_gateway(cluster) as gw:
                status, _ = await gw.post(CHAT, {"model": "m", "messages": []}, headers=CREDENTIALS)
    assert status == 502
    lines = log.getvalue().splitlines()
    assert any('"endpoint failed"' in line and "ClientResponseError" in line for line in lines)
    assert [line for line in lines if SECRET in line] == []


async def test_a_failure_of_the_gateway_itself_logs_its_stack_but_no_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster().synced()
    cluster.serve("m", Endpoint("127.0.0.1", 9))

    async with running_gateway(cluster) as gw:

        async def broken(request: aiohttp.web.Request, *_: object) -> aiohttp.web.StreamResponse:
            raise RuntimeError(f"cannot forward a request with Authorization: {request.headers['Authorization']}")

        monkeypatch.setattr(gw.gateway.proxy, "forward", broken)
        with rendered_log() as log:
            status, answer = await gw.post(CHAT, {"model": "m", "messages": []}, headers=CREDENTIALS)
    assert (status, answer["error"]["code"]) == (500, "internal_error")
    [line] = [line for line in log.getvalue().splitlines() if '"request failed"' in line]
    assert "RuntimeError" in line
    assert "in broken" in line  # the stack, down to where it failed
    assert SECRET not in log.getvalue()


def test_a_sanitised_error_keeps_the_type_and_message_and_cuts_every_credential() -> None:
    exc = ValueError(f"rejected Bearer {SECRET} with key-{SECRET}; session={SECRET}")
    assert sanitised_error(exc, CREDENTIALS) == f"ValueError: rejected {REDACTED} with {REDACTED}; {REDACTED}"


async def test_a_sanitised_upstream_error_says_its_status_and_message_without_the_request() -> None:
    async with garbling_engine() as engine, aiohttp.ClientSession() as session:
        url = f"http://{engine.address}:{engine.port}/"
        with pytest.raises(aiohttp.ClientResponseError) as caught:
            await asyncio.wait_for(session.post(url, data=b"{}", headers={"X-Trace": SECRET}), WAIT)
    assert SECRET in repr(caught.value)  # what aiohttp's repr holds: any request header
    text = sanitised_error(caught.value)
    assert text.startswith("ClientResponseError: status=400, message=")
    assert SECRET not in text

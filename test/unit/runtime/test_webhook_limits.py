"""The webhook server's bounds: requests and body bytes in flight (429 at once, before the body is read), read
deadlines (stalled heads and bodies are dropped), and what a burst of maximum-size reviews costs in memory."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.webhook import Rule, Webhook, WebhookServer, WebhookType, allowed
from llmaz.runtime.webhook.review import MAX_BODY_BYTES, AdmissionRequest
from llmaz.runtime.webhook.server import Limits
from llmaz_dev.testing.runnables import running
from llmaz_dev.testing.servers import ServersProcess
from llmaz_dev.testing.waiting import eventually

from .helpers import closed_within

MiB = 1024 * 1024
DEPLOYMENT_MEMORY_LIMIT = 256 * MiB  # config/manager/manager.yaml


async def allow(_: AdmissionRequest) -> Any:
    return allowed()


HOOK = Webhook("vthing.example.io", "/validate-thing", WebhookType.VALIDATING, (Rule(("g",), ("v1",), ("t",)),), allow)
REVIEW = orjson.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": "g", "version": "v1", "kind": "T"}, "operation": "CREATE",
                    "object": {"metadata": {"name": "x"}, "pad": "x" * 1000}},
    }
)  # fmt: skip


@contextlib.asynccontextmanager
async def serving(limits: Limits) -> AsyncIterator[WebhookServer]:
    async with running(WebhookServer([HOOK], host="127.0.0.1", port=0, tls=False, limits=limits)) as server:
        yield server


async def send(port: int, head: str, body: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode() + body)
    await writer.drain()
    return reader, writer


def post(length: int | None, path: str = HOOK.path) -> str:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"


async def response(reader: asyncio.StreamReader, within: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    async with asyncio.timeout(within):
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def refused(code: str) -> float:
    return (
        REGISTRY.get_sample_value("controller_runtime_webhook_requests_total", {"webhook": HOOK.path, "code": code})
        or 0
    )


async def test_a_request_beyond_the_request_bound_gets_429_at_once_without_its_body_being_read() -> None:
    async with serving(Limits(max_requests=1)) as server:
        first_reader, first = await send(server.port, post(len(REVIEW)), REVIEW[:10])
        await eventually(lambda: server.in_flight == (1, len(REVIEW)), 5, "the first request is taken on")
        before = refused("429")
        second_reader, second = await send(server.port, post(len(REVIEW)))  # the body is never sent
        status, headers, _ = await response(second_reader)
        assert (status, headers["retry-after"], headers["connection"]) == (429, "1", "close")
        assert refused("429") == before + 1
        first.write(REVIEW[10:])
        status, _, body = await response(first_reader)
        assert (status, orjson.loads(body)["response"]["allowed"]) == (200, True)
        for writer in (first, second):
            writer.close()
        await eventually(lambda: server.in_flight == (0, 0), 5, "every reservation is released")


async def test_a_body_beyond_the_byte_bound_gets_429_at_once() -> None:
    async with serving(Limits(max_bytes=MAX_BODY_BYTES)) as server:
        _, first = await send(server.port, post(MAX_BODY_BYTES - 100), b"{")
        await eventually(lambda: server.in_flight == (1, MAX_BODY_BYTES - 100), 5, "the big body is reserved")
        second_reader, second = await send(server.port, post(len(REVIEW)))
        assert (await response(second_reader))[0] == 429
        first.close()
        second.close()
        await eventually(lambda: server.in_flight == (0, 0), 5, "every reservation is released")


async def test_a_chunked_body_is_counted_while_it_is_read_and_refused_when_it_outgrows_the_bound() -> None:
    async with serving(Limits(max_bytes=MAX_BODY_BYTES)) as server:
        _, first = await send(server.port, post(MAX_BODY_BYTES - 1000), b"{")
        await eventually(lambda: server.in_flight[0] == 1, 5, "the big body is reserved")
        reader, second = await send(server.port, post(None), b"100\r\n" + b" " * 0x100 + b"\r\n")
        await eventually(lambda: server.in_flight == (2, MAX_BODY_BYTES - 1000 + 0x100), 5, "the chunk is counted")
        second.write(b"800\r\n" + b" " * 0x800 + b"\r\n")  # 2 KiB more than is left
        assert (await response(reader))[0] == 429
        first.close()
        second.close()
        await eventually(lambda: server.in_flight == (0, 0), 5, "every reservation is released")


async def test_a_body_that_stalls_is_dropped_within_the_read_timeout() -> None:
    async with serving(Limits(read_timeout=0.5)) as server:
        before = refused("408")
        reader, writer = await send(server.port, post(len(REVIEW)), REVIEW[:10])
        assert await closed_within(reader, 5) < 2.0
        assert refused("408") == before + 1
        assert server.in_flight == (0, 0)
        writer.close()


async def test_a_request_head_that_stalls_is_dropped_within_the_read_timeout() -> None:
    async with serving(Limits(read_timeout=0.5)) as server:
        reader, writer = await send(server.port, "POST /validate-thing HTTP/1.1\r\nHost")
        assert await closed_within(reader, 5) < 2.0
        writer.close()


async def test_a_declared_body_over_the_cap_is_a_400_review_without_being_read() -> None:
    async with serving(Limits()) as server:
        reader, writer = await send(server.port, post(MAX_BODY_BYTES + 1))
        status, _, body = await response(reader)
        review = orjson.loads(body)["response"]
        assert (status, review["allowed"], review["status"]["code"]) == (200, False, 400)
        assert "too large" in review["status"]["message"]
        writer.close()


def test_limits_below_one_maximum_size_review_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one maximum-size review"):
        Limits(max_bytes=MAX_BODY_BYTES - 1)
    with pytest.raises(ValueError, match="max_requests"):
        Limits(max_requests=0)


def max_size_review(shape: str) -> bytes:
    """An UPDATE review of a Playground, object and oldObject, just under MAX_BODY_BYTES and within the JSON
    value limit: the shapes that cost the most memory per byte once decoded (many small env entries, a large
    label map) and the one that costs the least (one large annotation)."""
    half = (MAX_BODY_BYTES - 2000) // 2
    spec: dict[str, Any] = {"modelClaim": {"modelName": "m"}}
    meta: dict[str, Any] = {"name": "p", "namespace": "n"}
    if shape == "envs":
        spec["backendRuntimeConfig"] = {"envs": [{"name": "n" * 48}] * (half // 60)}
    elif shape == "labels":
        meta["labels"] = {f"k{i:07d}": "v" * 16 for i in range(half // 30)}
    else:
        meta["annotations"] = {"a": "x" * half}
    obj = {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground", "metadata": meta, "spec": spec}
    kind = {"group": "inference.llmaz.io", "version": "v1alpha1", "kind": "Playground"}
    request = {"uid": "u", "kind": kind, "operation": "UPDATE", "name": "p", "namespace": "n",
               "object": obj, "oldObject": obj}  # fmt: skip
    body = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    assert MAX_BODY_BYTES - 100_000 < len(body) <= MAX_BODY_BYTES
    return body


async def burst(port: int, path: str, body: bytes, count: int) -> Counter[int]:
    """`count` concurrent POSTs of `body` over TLS, each on its own connection: the status codes."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the servers process's self-signed certificate

    async def one(session: aiohttp.ClientSession) -> int:
        headers = {"Content-Type": "application/json"}
        async with session.post(f"https://127.0.0.1:{port}{path}", data=body, headers=headers, ssl=context) as resp:
            await resp.read()
            if resp.status == 429:
                assert resp.headers["Retry-After"] == "1"
            return resp.status

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as session:
        return Counter(await asyncio.gather(*(one(session) for _ in range(count))))


@pytest.mark.timeout(180)
async def test_128_concurrent_maximum_size_reviews_stay_within_the_deployment_memory_limit() -> None:
    # Memory is what is measured: read deadlines long enough that a loaded machine does not close a connection
    # still sending its body (the deadlines have their own tests).
    async with ServersProcess.start(read_timeout=60.0) as servers:
        port = servers.ports["webhook"]
        for shape, path in [
            ("envs", "/validate-inference-llmaz-io-v1alpha1-playground"),
            ("labels", "/mutate-inference-llmaz-io-v1alpha1-playground"),
            ("annotation", "/validate-inference-llmaz-io-v1alpha1-playground"),
        ]:
            codes = await asyncio.wait_for(burst(port, path, max_size_review(shape), 128), 60)
            assert set(codes) <= {200, 429}, codes
            assert codes[200] >= 1
        peak = servers.peak_rss()
        assert peak < DEPLOYMENT_MEMORY_LIMIT, f"peak RSS {peak / MiB:.0f} MiB"
        # Still serving, and nothing went wrong on the way.
        assert await asyncio.wait_for(burst(port, path, max_size_review("annotation"), 1), 30) == {200: 1}
        assert "Traceback" not in servers.stderr()


@pytest.mark.timeout(120)
async def test_a_thousand_stalled_connections_are_all_dropped_within_the_read_timeout() -> None:
    async with ServersProcess.start(read_timeout=2.0) as servers:

        async def stall(port: int, first_byte: bytes) -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(first_byte)  # a TLS handshake record's first byte; a request line's first letter
            await writer.drain()
            try:
                return await closed_within(reader, 30)
            finally:
                writer.close()

        held = await asyncio.gather(
            *(stall(servers.ports["webhook"], b"\x16") for _ in range(1000)),
            *(stall(servers.ports["probes"], b"G") for _ in range(200)),
        )
        assert max(held) < 2.0 + 2.0, f"held up to {max(held):.1f} s"
        assert servers.peak_rss() < 128 * MiB
        url = f"http://127.0.0.1:{servers.ports['probes']}/readyz"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200

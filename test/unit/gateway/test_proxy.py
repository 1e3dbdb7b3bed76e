"""Forwarding through a real gateway to fake engines on 127.0.0.1: streaming, cancellation, retries, timeouts.

Ordering between client, gateway and engine is forced with events (the engine waits for the test, the test
waits for what the client received); every wait is bounded by WAIT.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import orjson
import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from llmaz.gateway.proxy.forwarding import ProxyOptions, upstream_headers
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.waiting import eventually

from .support import (
    FIRST_EVENT,
    LAST_EVENTS,
    LEAST_OUTSTANDING_GATEWAY,
    WAIT,
    Cluster,
    engines,
    refused_endpoint,
    running_gateway,
)

CHAT = "/v1/chat/completions"
STREAM_BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})


async def test_a_request_is_forwarded_as_sent_and_the_answer_relayed_with_status_and_headers() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            raw = b'{"model":"m",  "messages": [], "x": 1}'
            headers = {"Authorization": "Bearer engine-key", "Connection": "keep-alive, X-Hop", "X-Hop": "1"}
            url = gw.url + CHAT + "?q=%20a"
            async with gw.session.post(url, data=raw, headers=headers, skip_auto_headers=["Content-Type"]) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("application/json")
                assert (await resp.json())["usage"]["total_tokens"] == 8
            (seen,) = engine.requests
            assert (seen.method, seen.path_qs, seen.body) == ("POST", CHAT + "?q=%20a", raw)
            assert seen.headers["Authorization"] == "Bearer engine-key"  # no gateway keys: the engine's own
            assert seen.headers["Content-Type"] == "application/json"  # sent without one: the body is JSON
            assert seen.headers["X-Forwarded-For"] == "127.0.0.1"
            assert "X-Hop" not in seen.headers


def test_hop_by_hop_and_body_framing_headers_stay_behind_and_the_client_is_named() -> None:
    sent = CIMultiDictProxy(
        CIMultiDict(
            [
                ("Host", "gw"),
                ("Content-Length", "10"),
                ("Content-Encoding", "gzip"),  # aiohttp decoded the body: it goes on uncompressed
                ("Transfer-Encoding", "chunked"),
                ("Connection", "close, X-Private"),
                ("X-Private", "1"),
                ("Keep-Alive", "timeout=5"),
                ("Authorization", "Bearer k"),
                ("Content-Type", "application/json; charset=utf-8"),
                ("X-Forwarded-For", "10.0.0.9"),
                ("x-ai-eg-model", "m"),
            ]
        )
    )
    forwarded = upstream_headers(sent, "10.0.0.1", forward_authorization=False)
    assert dict(forwarded) == {
        "Content-Type": "application/json; charset=utf-8",
        "X-Forwarded-For": "10.0.0.9, 10.0.0.1",
        "x-ai-eg-model": "m",
    }
    assert upstream_headers(sent, None, forward_authorization=True)["Authorization"] == "Bearer k"


async def test_a_stream_reaches_the_client_chunk_by_chunk_before_the_engine_sends_the_rest() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw, gw.session.post(gw.url + CHAT, data=STREAM_BODY) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream"
            # The engine is parked on `release` after its first event: if the gateway buffered, this would hang.
            first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT)
            assert first == FIRST_EVENT
            assert not engine.release.is_set()
            engine.release.set()
            assert await asyncio.wait_for(resp.content.read(), WAIT) == LAST_EVENTS
        assert gw.sample("llmaz_gateway_prompt_tokens_total", model="m") == 7
        assert gw.sample("llmaz_gateway_completion_tokens_total", model="m") == 11
        assert gw.sample("llmaz_gateway_time_to_first_byte_seconds_count", model="m") == 1


async def test_a_client_that_disconnects_mid_stream_cancels_the_engine_request() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            resp = await gw.session.post(gw.url + CHAT, data=STREAM_BODY)
            assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT) == FIRST_EVENT
            resp.close()  # drops the connection, as a client going away does
            await asyncio.wait_for(engine.cancelled.wait(), WAIT)
            await eventually(lambda: gw.sample("llmaz_gateway_requests_total", model="m", code="499"), WAIT)
            assert gw.gateway.in_flight.busy() == {}
            assert gw.sample("llmaz_gateway_requests_in_flight", model="m") == 0


async def test_a_client_that_disconnects_before_the_answer_cancels_the_engine_request() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.hang
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            request = asyncio.create_task(gw.post(CHAT, {"model": "m"}))
            await eventually(lambda: engine.requests, WAIT)
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await request
            await asyncio.wait_for(engine.cancelled.wait(), WAIT)


async def test_a_stream_to_llamacpp_goes_on_a_connection_of_its_own_closed_at_its_end() -> None:
    # As llama.cpp does: keep-alive in the headers, but a connection that carried a stream is closed, so a request
    # sent on it again is lost. The engine here drops such a connection when a second request arrives on it, which
    # the gateway, with a single endpoint, could only answer 502.
    streamed_on: set[object] = set()
    asked: list[str | None] = []

    async with engines(1) as (engine,):

        async def stream_then_drop_the_connection(request: web.Request) -> web.StreamResponse:
            assert request.transport is not None
            if request.transport in streamed_on:
                request.transport.close()
                return web.Response()
            streamed_on.add(request.transport)
            asked.append(request.headers.get("Connection"))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(FIRST_EVENT + LAST_EVENTS)
            await resp.write_eof()
            return resp

        engine.handler = stream_then_drop_the_connection
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint, backend="llamacpp")
        async with running_gateway(cluster) as gw:
            for _ in range(3):
                async with gw.session.post(gw.url + CHAT, data=STREAM_BODY) as resp:
                    assert resp.status == 200
                    assert await asyncio.wait_for(resp.content.read(), WAIT) == FIRST_EVENT + LAST_EVENTS
            assert len(streamed_on) == 3  # each stream had a connection of its own
            assert asked == ["close"] * 3


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
async def test_a_stream_to_an_engine_that_keeps_connections_alive_reuses_them(backend: str) -> None:
    streamed_on: list[object] = []
    asked: list[str | None] = []

    async with engines(1) as (engine,):

        async def stream(request: web.Request) -> web.StreamResponse:
            streamed_on.append(request.transport)
            asked.append(request.headers.get("Connection"))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(FIRST_EVENT + LAST_EVENTS)
            await resp.write_eof()
            return resp

        engine.handler = stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint, backend=backend)
        async with running_gateway(cluster) as gw:
            for _ in range(3):
                async with gw.session.post(gw.url + CHAT, data=STREAM_BODY) as resp:
                    assert resp.status == 200
                    assert await asyncio.wait_for(resp.content.read(), WAIT) == FIRST_EVENT + LAST_EVENTS
        assert "close" not in asked
        assert len(set(map(id, streamed_on))) == 1  # one pooled connection carried every stream


async def test_a_refused_connection_is_retried_on_another_endpoint() -> None:
    async with engines(1) as (engine,):
        with refused_endpoint() as refused:
            cluster = Cluster().synced()
            cluster.serve("m", refused, engine.endpoint)
            in_flight = InFlight()
            in_flight.acquire(engine.endpoint)  # makes the refusing endpoint the least loaded: it is tried first
            async with running_gateway(cluster, in_flight=in_flight) as gw:
                status, _ = await gw.post(CHAT, {"model": "m"})
                assert status == 200
                assert len(engine.requests) == 1
                assert gw.sample("llmaz_gateway_upstream_retries_total", model="m", reason="connect_error") == 1


async def test_an_engine_503_is_retried_on_another_endpoint_and_the_last_503_is_relayed() -> None:
    async with engines(2) as (busy, idle):
        busy.handler = busy.unavailable
        cluster = Cluster().synced()
        cluster.serve("m", busy.endpoint, idle.endpoint)
        in_flight = InFlight()
        in_flight.acquire(idle.endpoint)
        async with running_gateway(cluster, in_flight=in_flight) as gw:
            status, _ = await gw.post(CHAT, {"model": "m"})
            assert status == 200
            assert (len(busy.requests), len(idle.requests)) == (1, 1)
            assert gw.sample("llmaz_gateway_upstream_retries_total", model="m", reason="unavailable") == 1
            idle.handler = idle.unavailable
            status, answer = await gw.post(CHAT, {"model": "m"})
            assert (status, answer) == (503, {"error": {"message": "overloaded"}})  # the engine's own answer


async def test_retries_stop_at_the_configured_number() -> None:
    async with engines(3) as all_engines:
        for engine in all_engines:
            engine.handler = engine.unavailable
        cluster = Cluster().synced()
        cluster.serve("m", *(e.endpoint for e in all_engines))
        async with running_gateway(cluster, GatewayOptions(proxy=ProxyOptions(retries=1))) as gw:
            status, _ = await gw.post(CHAT, {"model": "m"})
            assert status == 503
            assert sum(len(e.requests) for e in all_engines) == 2


async def test_when_no_endpoint_can_be_reached_the_answer_is_502() -> None:
    with refused_endpoint() as a, refused_endpoint() as b:
        cluster = Cluster().synced()
        cluster.serve("m", a, b)
        async with running_gateway(cluster) as gw:
            status, answer = await gw.post(CHAT, {"model": "m"})
            assert (status, answer["error"]["code"]) == (502, "upstream_unreachable")
            assert gw.sample("llmaz_gateway_upstream_retries_total", model="m", reason="connect_error") == 1


async def test_an_engine_failure_after_the_first_byte_is_not_retried_and_truncates_the_answer() -> None:
    async with engines(2) as (failing, healthy):
        failing.handler = failing.die_after_first_chunk
        cluster = Cluster().synced()
        cluster.serve("m", failing.endpoint, healthy.endpoint)
        in_flight = InFlight()
        in_flight.acquire(
            healthy.endpoint
        )  # least outstanding then picks the failing one (a keyed prompt would go home)
        async with running_gateway(cluster, LEAST_OUTSTANDING_GATEWAY, in_flight=in_flight) as gw:
            async with gw.session.post(gw.url + CHAT, data=STREAM_BODY) as resp:
                assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT) == FIRST_EVENT
                failing.release.set()
                with pytest.raises(aiohttp.ClientPayloadError):
                    await asyncio.wait_for(resp.content.read(), WAIT)
            assert healthy.requests == []
            assert gw.sample("llmaz_gateway_upstream_retries_total", model="m", reason="connect_error") == 0


async def test_an_engine_that_does_not_answer_in_time_is_a_504_and_is_not_retried() -> None:
    async with engines(2) as (slow, other):
        slow.handler = slow.hang
        cluster = Cluster().synced()
        cluster.serve("m", slow.endpoint, other.endpoint)
        in_flight = InFlight()
        in_flight.acquire(other.endpoint)
        async with running_gateway(
            cluster, GatewayOptions(proxy=ProxyOptions(read_timeout=0.2)), in_flight=in_flight
        ) as gw:
            status, answer = await gw.post(CHAT, {"model": "m"})
            assert (status, answer["error"]["code"]) == (504, "upstream_timeout")
            assert other.requests == []
            await asyncio.wait_for(slow.cancelled.wait(), WAIT)  # the abandoned engine request is closed too


async def test_an_engine_that_stalls_mid_stream_truncates_the_answer() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream  # parks after the first event until released; never released here
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with (
            running_gateway(cluster, GatewayOptions(proxy=ProxyOptions(read_timeout=0.3))) as gw,
            gw.session.post(gw.url + CHAT, data=STREAM_BODY) as resp,
        ):
            assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT) == FIRST_EVENT
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(resp.content.read(), WAIT)


async def test_resolve_sends_an_endpoints_requests_to_another_address_and_balances_by_the_endpoint() -> None:
    async with engines(1) as (engine,):
        listed = Endpoint("192.0.2.10", engine.port)  # TEST-NET-1: reached only through the override
        cluster = Cluster().synced()
        cluster.serve("m", listed)
        options = GatewayOptions(proxy=ProxyOptions(resolve={"192.0.2.10": "127.0.0.1"}))
        async with running_gateway(cluster, options) as gw:
            assert (await gw.post(CHAT, {"model": "m"}))[0] == 200
            assert len(engine.requests) == 1

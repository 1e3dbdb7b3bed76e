"""The two-stage listener: connections are bounded, handed to the HTTP server only once they have sent a whole
first message, dropped when they take too long, and slots pass on to waiting connections."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from llmaz.runtime.server.listener import IDLE_GRACE, ConnectionLimits, Connections, start_site, stop_accepting
from llmaz_dev.testing.waiting import eventually

from .helpers import closed_within, settle

GET = b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"


@dataclass
class Listening:
    port: int
    connections: Connections
    release: asyncio.Event  # lets GET /hold answer
    runner: web.AppRunner


@contextlib.asynccontextmanager
async def listening(limits: ConnectionLimits) -> AsyncIterator[Listening]:
    connections, release = Connections(), asyncio.Event()

    async def ping(_: web.Request) -> web.Response:
        return web.Response(text="pong")

    async def hold(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="held")

    app = web.Application(middlewares=[connections.middleware])
    app.router.add_get("/ping", ping)
    app.router.add_get("/hold", hold)
    runner = web.AppRunner(app, keepalive_timeout=60)
    await runner.setup()
    try:
        port = await start_site(runner, "127.0.0.1", 0, limits=limits, connections=connections)
        yield Listening(port, connections, release, runner)
    finally:
        release.set()
        await runner.cleanup()


async def opened(port: int, data: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def answer(reader: asyncio.StreamReader, within: float = 5.0) -> bytes:
    """The head and body of one response to GET /ping."""
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        return head + await reader.readexactly(4)


async def test_a_connection_that_sends_a_whole_request_is_served() -> None:
    async with listening(ConnectionLimits()) as served:
        reader, writer = await opened(served.port, GET[:5])
        writer.write(GET[5:])  # the rest of the head arrives later: still served
        assert (await answer(reader)).endswith(b"pong")
        writer.close()


async def test_a_connection_that_never_completes_its_first_request_is_dropped_in_time() -> None:
    async with listening(ConnectionLimits(first_message_timeout=0.5)) as served:
        reader, writer = await opened(served.port, b"GET /ping HT")
        assert await closed_within(reader, 5) < 1.5
        writer.close()


async def test_beyond_max_connections_new_connections_wait_in_the_backlog() -> None:
    async with listening(ConnectionLimits(max_connections=2, max_served=1, first_message_timeout=1.0)) as served:
        stalled = [await opened(served.port, b"G") for _ in range(3)]
        held = sorted(await asyncio.gather(*(closed_within(reader, 10) for reader, _ in stalled)))
        # Two are accepted and dropped after a second; the third is accepted only then, and dropped a second later.
        assert held[2] >= 1.9
        assert held[1] < held[2] - 0.5
        for _, writer in stalled:
            writer.close()


async def test_connections_that_go_away_early_give_their_slots_back() -> None:
    async with listening(ConnectionLimits(max_connections=2, max_served=1)) as served:
        for _ in range(20):
            _, writer = await opened(served.port, b"GET /pi")
            writer.close()
            await writer.wait_closed()
        reader, writer = await opened(served.port, GET)
        assert (await answer(reader)).endswith(b"pong")
        writer.close()


async def test_an_idle_keep_alive_connection_gives_its_slot_to_a_waiting_one() -> None:
    async with listening(ConnectionLimits(max_served=1)) as served:
        idle_reader, idle = await opened(served.port, GET)
        assert b"Connection: close" not in await answer(idle_reader)  # kept alive: it holds the only slot
        started = time.monotonic()
        reader, writer = await opened(served.port, GET)
        assert (await answer(reader, within=IDLE_GRACE + 5)).endswith(b"pong")
        assert time.monotonic() - started < IDLE_GRACE + 2
        assert await closed_within(idle_reader, 5) >= 0  # the idle one was closed to make room
        for w in (idle, writer):
            w.close()


async def test_while_connections_wait_responses_close_their_connection() -> None:
    async with listening(ConnectionLimits(max_served=1)) as served:
        first_reader, first = await opened(served.port, b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
        await eventually(lambda: len(served.connections.served) == 1, 5, "the first connection is served")
        second_reader, second = await opened(served.port, GET)
        await eventually(lambda: served.connections.waiting == 1, 5, "the second waits for the slot")
        served.release.set()
        async with asyncio.timeout(5):
            head = await first_reader.readuntil(b"\r\n\r\n")
        assert b"Connection: close" in head
        assert (await answer(second_reader)).endswith(b"pong")
        for w in (first, second):
            w.close()


async def test_a_draining_server_closes_a_quiet_keep_alive_connection_and_returns() -> None:
    async with listening(ConnectionLimits()) as served:
        reader, writer = await opened(served.port, GET)
        assert b"Connection: close" not in await answer(reader)
        async with asyncio.timeout(5):
            await served.connections.drain(within=30, quiet=0.2)
        assert not served.connections.served
        assert await reader.read() == b""  # closed, with no response to a request that was never sent
        writer.close()


async def test_a_request_in_hand_when_draining_starts_is_answered_and_its_connection_closed() -> None:
    async with listening(ConnectionLimits()) as served:
        reader, writer = await opened(served.port, b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
        await eventually(lambda: len(served.connections.served) == 1, 5, "the connection is served")
        draining = asyncio.create_task(served.connections.drain(within=30, quiet=0))
        await eventually(lambda: served.connections.draining, 5, "draining started")
        assert not draining.done()  # the request in hand keeps its connection open
        served.release.set()
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            await draining
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Connection: close" in head
        writer.close()


async def test_a_request_the_kernel_holds_but_the_server_has_not_read_is_answered_not_dropped() -> None:
    async with listening(ConnectionLimits()) as served:
        reader, writer = await opened(served.port, GET)
        assert b"Connection: close" not in await answer(reader)
        (transport,) = served.connections.served
        writer.write(GET)  # sent at once: the transport's buffer is empty
        # Wait, without letting the event loop run, until the request is in the server's socket buffer: the
        # server has not read it, so by its own state the connection is quiet.
        server_fd = transport.get_extra_info("socket").fileno()
        assert select.select([server_fd], [], [], 5)[0] == [server_fd]
        async with asyncio.timeout(5):
            await served.connections.drain(within=30, quiet=0)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Connection: close" in head
        assert await reader.readexactly(4) == b"pong"
        writer.close()


async def test_draining_gives_up_after_its_bound_and_cleanup_closes_the_rest() -> None:
    async with listening(ConnectionLimits()) as served:
        _, writer = await opened(served.port, b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
        await eventually(lambda: len(served.connections.served) == 1, 5, "the connection is served")
        started = time.monotonic()
        await served.connections.drain(within=0.3, quiet=0)
        assert 0.3 <= time.monotonic() - started < 3
        assert len(served.connections.served) == 1  # still answering its request
        writer.close()


@pytest.mark.parametrize("accepting", [False, True], ids=["before-the-first-accept", "while-accepting"])
async def test_a_connection_arriving_as_the_site_stops_is_closed_not_left_hanging(accepting: bool) -> None:
    # The connection is in the listen backlog when the site stops, in the event-loop turn in which the listening
    # socket's readiness is seen: it must not be accepted after the stop, open and never served or closed.
    for _ in range(20):
        async with listening(ConnectionLimits()) as served:
            if accepting:
                await settle(5)  # the site waits for its listening socket to be readable
            client = socket.create_connection(("127.0.0.1", served.port))
            client.setblocking(False)
            await asyncio.sleep(0)  # the next turn's select sees the listening socket readable
            await stop_accepting(served.runner)
            reader, writer = await asyncio.open_connection(sock=client)
            writer.write(GET)
            await closed_within(reader, 2.0)
            writer.close()

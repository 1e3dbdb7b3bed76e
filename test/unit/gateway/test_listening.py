"""The gateway on the project's listener: IPv6 and dual-stack binds, and stalled connections held within the limit.

Everything is on loopback; every wait is bounded, and the stalled connections are closed by the gateway itself
(its header timeout) or by the test at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway, GatewayOptions
from llmaz_dev.testing.waiting import eventually

from ..runtime.helpers import closed_within
from .support import WAIT, Cluster

STALLED = 1000
# A request head that never ends: no blank line after the headers.
PARTIAL_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"


@contextlib.asynccontextmanager
async def gateway_at(options: GatewayOptions) -> AsyncIterator[Gateway]:
    gateway = Gateway(Cluster().synced().catalog(), options, metrics=GatewayMetrics(process_collectors=False))
    stopping = asyncio.Event()
    task = asyncio.create_task(gateway.run(stopping))
    await asyncio.wait_for(gateway.wait_serving(), WAIT)
    try:
        yield gateway
    finally:
        stopping.set()
        await asyncio.wait_for(task, WAIT + options.drain_timeout)


async def models_status(host: str, port: int | None) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/v1/models") as resp:
        return resp.status


@pytest.mark.parametrize(
    ("bind", "answering", "refusing"),
    [
        ("[::1]:0", ["[::1]"], ["127.0.0.1"]),
        ("0.0.0.0:0", ["127.0.0.1"], ["[::1]"]),
        (":0", ["[::1]", "127.0.0.1"], []),  # the default form: every interface, IPv4 and IPv6
    ],
)
async def test_the_api_and_the_activator_answer_on_the_families_their_address_names(
    bind: str, answering: list[str], refusing: list[str]
) -> None:
    host = bind.rpartition(":")[0]
    options = GatewayOptions(bind_address=bind, activator_address=f"{host}:0")
    async with gateway_at(options) as gateway:
        for client in answering:
            assert await models_status(client, gateway.port) == 200
            assert await models_status(client, gateway.activator_port) == 200
        for client in refusing:
            with pytest.raises(aiohttp.ClientConnectionError):
                await models_status(client, gateway.port)


@contextlib.contextmanager
def open_files(needed: int) -> Iterator[None]:
    """Room for `needed` file descriptors in this process (both ends of every loopback connection are here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= needed, f"the test needs {needed} open files, the hard limit is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def stall(port: int | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(PARTIAL_HEAD)
    await writer.drain()
    return reader, writer


async def test_a_thousand_stalled_connections_are_held_and_new_clients_are_still_answered() -> None:
    with open_files(2 * STALLED + 200):
        async with gateway_at(GatewayOptions(bind_address="127.0.0.1:0")) as gateway:
            stalled = [await stall(gateway.port) for _ in range(STALLED)]
            try:
                await eventually(lambda: gateway.held_connections() == STALLED, WAIT, "every stalled one held")
                assert await asyncio.wait_for(models_status("127.0.0.1", gateway.port), WAIT) == 200
            finally:
                for _, writer in stalled:
                    writer.close()
            await eventually(lambda: gateway.held_connections() == 0, WAIT, "closed ones released")


async def test_stalled_connections_never_grow_past_the_limit_and_are_dropped_after_the_header_timeout() -> None:
    limit, header_timeout = 200, 2.0
    options = GatewayOptions(bind_address="127.0.0.1:0", header_timeout=header_timeout, max_connections=limit)
    with open_files(2 * STALLED + 200):
        async with gateway_at(options) as gateway:
            seen: list[int] = []  # the count the gateway holds, each time it is looked at

            def held_now() -> int:
                seen.append(gateway.held_connections())
                return seen[-1]

            async def one() -> float:
                reader, writer = await stall(gateway.port)
                held_now()
                try:
                    return await closed_within(reader, 60)
                finally:
                    held_now()
                    writer.close()

            stalling = asyncio.gather(*(one() for _ in range(STALLED)))
            await eventually(lambda: held_now() == limit, WAIT, "the limit reached")
            held = await stalling
            assert max(seen) == limit  # never passed: the rest waited in the kernel's backlog
            assert min(held) >= header_timeout * 0.9
            # Those taken first were dropped by the header timeout, long before the clients' own 60 s (the bound is
            # loose: a loaded machine delays the accept loop, not the timeout's effect).
            assert sorted(held)[limit - 1] < 30.0
            assert gateway.held_connections() == 0
            assert await asyncio.wait_for(models_status("127.0.0.1", gateway.port), WAIT) == 200

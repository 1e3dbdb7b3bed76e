"""The transport against a loopback HTTP server: one deadline bounds a request and all its retries, and a guarded
client's writes are checked right before each is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmaz.runtime.client import Client, RestConfig, TooManyRequests
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)


class InstantClock(FakeClock):
    """Sleeps return at once, having moved the clock by their length: retries run without real waiting, and
    deadlines are measured on this clock."""

    async def sleep(self, seconds: float) -> None:
        self.step(max(0.0, seconds))


class Server:
    """Answers every request with `status` (429 with Retry-After: 1 by default) and records what it got."""

    def __init__(self) -> None:
        self.status = 429
        self.requests: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.method)
        if self.status == 200:
            return web.json_response({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}})
        body = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}
        return web.Response(status=429, body=orjson.dumps(body), headers={"Retry-After": "1"})


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    state = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    try:
        yield state, str(test_server.make_url("")).rstrip("/")
    finally:
        await test_server.close()


def client(url: str, clock: FakeClock, **config: Any) -> Client:
    return Client(RestConfig(host=url, qps=0, **config), clock)


async def test_retries_of_a_throttled_request_stop_at_its_timeout(server: tuple[Server, str]) -> None:
    state, url = server
    clock = InstantClock()
    started = clock.now()
    async with client(url, clock) as c:
        with pytest.raises(TooManyRequests):
            await c.get(CONFIGMAPS, "a", "ns", request_timeout=2.5)
    # Attempts at 0, 1 and 2 s; a fourth, after another second, would start past the 2.5 s deadline.
    assert len(state.requests) == 3
    assert clock.now() - started <= 2.5


async def test_within_a_long_timeout_retries_stop_after_max_retries(server: tuple[Server, str]) -> None:
    state, url = server
    async with client(url, InstantClock(), max_retries=5) as c:
        with pytest.raises(TooManyRequests):
            await c.get(CONFIGMAPS, "a", "ns", request_timeout=60)
    assert len(state.requests) == 6


async def test_a_guarded_client_checks_each_write_attempt_before_sending_it(server: tuple[Server, str]) -> None:
    state, url = server
    allowed = [True]

    def guard() -> None:
        if not allowed[0]:
            raise PermissionError("not leading")
        allowed[0] = False  # the first attempt passes; its retry must not

    async with client(url, InstantClock()) as plain:
        guarded = plain.guarded(guard)
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
        with pytest.raises(PermissionError):
            await guarded.create(CONFIGMAPS, cm)
        assert state.requests == ["POST"]  # sent once, then throttled; the retry was refused before sending
        state.status = 200
        assert (await guarded.get(CONFIGMAPS, "a", "ns"))["metadata"]["name"] == "a"  # reads are never refused
        await plain.create(CONFIGMAPS, cm)  # the original client is not guarded
        await guarded.close()  # a guarded view leaves the shared session open
        await plain.get(CONFIGMAPS, "a", "ns")
    assert state.requests == ["POST", "GET", "POST", "GET"]

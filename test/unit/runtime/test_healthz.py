"""Probe endpoints: 200 "ok" when healthy, 500 naming failing checks, ?verbose, ?exclude, per-check paths."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from llmaz.runtime.server.healthz import CheckFailed, HealthProbeServer
from llmaz_dev.testing.runnables import running


@pytest_asyncio.fixture
async def server() -> AsyncIterator[HealthProbeServer]:
    async with running(HealthProbeServer("127.0.0.1:0")) as probe:
        yield probe


async def get(probe: HealthProbeServer, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{probe.port}{path}") as resp,
    ):
        return resp.status, await resp.text()


async def test_all_checks_passing_answers_200_ok(server: HealthProbeServer) -> None:
    server.readyz.add("sync", lambda: True)
    assert await get(server, "/healthz") == (200, "ok")
    assert await get(server, "/readyz") == (200, "ok")


async def test_a_failing_check_answers_500_and_names_it_without_the_reason(server: HealthProbeServer) -> None:
    def broken() -> None:
        raise RuntimeError("secret detail")

    async def not_ready() -> bool:
        return False

    server.readyz.add("informers", lambda: True)
    server.readyz.add("webhooks", broken)
    server.readyz.add("certs", not_ready)
    status, body = await get(server, "/readyz")
    assert status == 500
    assert body.splitlines() == [
        "[+]informers ok",
        "[-]webhooks failed: reason withheld",
        "[-]certs failed: reason withheld",
        "readyz check failed",
    ]
    assert "secret" not in body


async def test_a_check_failing_with_checkfailed_serves_its_reason(server: HealthProbeServer) -> None:
    def missing_crd() -> None:
        raise CheckFailed("resource x.example.com/v1/ys is not served by the API server; fix: install it")

    server.readyz.add("informers", missing_crd)
    assert await get(server, "/readyz") == (
        500,
        "[-]informers failed: resource x.example.com/v1/ys is not served by the API server; fix: install it\n"
        "readyz check failed\n",
    )


async def test_a_failing_check_is_logged_when_it_starts_failing_and_when_it_passes_again(
    server: HealthProbeServer,
) -> None:
    failing = ["cache empty"]

    def check() -> None:
        if failing:
            raise CheckFailed(failing[0])

    server.readyz.add("cache", check)
    with capture_logs() as logs:
        for _ in range(3):
            await get(server, "/readyz")
        failing[0] = "cache half full"
        await get(server, "/readyz")
        failing.clear()
        for _ in range(2):
            await get(server, "/readyz")
    assert [(log["event"], log.get("error")) for log in logs] == [
        ("check failed", "cache empty"),
        ("check failed", "cache half full"),
        ("check passed", None),
    ]


async def test_verbose_lists_passing_checks(server: HealthProbeServer) -> None:
    status, body = await get(server, "/healthz?verbose")
    assert status == 200
    assert body.splitlines() == ["[+]ping ok", "healthz check passed"]


async def test_excluded_checks_are_skipped(server: HealthProbeServer) -> None:
    server.readyz.add("webhooks", lambda: False)
    assert await get(server, "/readyz?exclude=webhooks") == (200, "ok")


async def test_a_single_check_can_be_queried_by_path(server: HealthProbeServer) -> None:
    server.readyz.add("a", lambda: True)
    server.readyz.add("b", lambda: False)
    assert (await get(server, "/readyz/a"))[0] == 200
    assert (await get(server, "/readyz/b"))[0] == 500
    assert (await get(server, "/readyz/missing"))[0] == 404


def test_a_check_name_is_registered_once() -> None:
    probe = HealthProbeServer()
    with pytest.raises(ValueError, match="already registered"):
        probe.healthz.add("ping", lambda: None)

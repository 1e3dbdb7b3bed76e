"""A resource the API server does not serve: reported once, with its fix, on /readyz, and waited for, not fatal.

Per-resource cache options: selectors ANDed with the caller's, a transform on every informer of the resource.
Against `FakeApi` (a real HTTP server for one resource); backoffs run on a FakeClock that the checks step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from structlog.testing import capture_logs

from llmaz.runtime.cache import NOT_SERVED, SharedInformerFactory
from llmaz.runtime.cache.transform import strip_metadata
from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.manager import Manager, ManagerOptions
from llmaz.runtime.runnable import until_cancelled
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.runnables import stop
from llmaz_dev.testing.waiting import eventually

from .fakeapi import WIDGETS, FakeApi

FIX = "install the widget CRD: kubectl apply -f widgets.yaml"
WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {
        "name": "w",
        "resourceVersion": "4",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"},
        "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    },
}


@contextlib.asynccontextmanager
async def fake_api() -> AsyncIterator[tuple[FakeApi, Client]]:
    api = FakeApi([WIDGET])
    async with api.running():
        client = Client(RestConfig(host=api.url, qps=0))
        try:
            yield api, client
        finally:
            await client.close()


async def test_a_resource_not_served_is_logged_once_with_its_fix_waited_for_and_cached_once_served() -> None:
    clock = FakeClock()
    async with fake_api() as (api, client):
        factory = SharedInformerFactory(client, clock=clock)
        factory.configure(WIDGETS, label_selector="owner=me", transform=strip_metadata())
        factory.add_fix_hint(WIDGETS, NOT_SERVED, FIX)
        informer = factory.informer_for(WIDGETS, label_selector="tier=x")
        with capture_logs() as logs:
            run = asyncio.create_task(factory.run())
            await eventually(clock.stepping(lambda: api.lists() >= 3), within=30, what="three failed lists")
            problem = informer.problem
            assert problem is not None
            assert problem.reason == NOT_SERVED
            assert str(problem) == f"resource example.com/v1/widgets is not served by the API server; fix: {FIX}"
            assert factory.problems() == [problem]
            sync = asyncio.create_task(factory.wait_for_sync(0))  # past its deadline at once: still waits
            await asyncio.sleep(0)
            assert not sync.done()
            api.served = True
            await eventually(clock.stepping(sync.done), within=30, what="the cache to sync")
            await sync
            await stop(run)
    errors = [log for log in logs if log["log_level"] == "error"]
    assert [(e["event"], e["resource"], e["fix"]) for e in errors] == [
        ("resource is not served by the API server", "example.com/v1/widgets", FIX)
    ]
    assert [log["event"] for log in logs if log["event"] == "resource can be listed again"] != []
    assert informer.problem is None
    assert factory.problems() == []
    assert {q.get("labelSelector") for q in api.queries} == {"owner=me,tier=x"}
    assert informer.store.get("w") is not None
    assert informer.store.get("w")["metadata"]["annotations"] == {"keep": "me"}  # type: ignore[index]
    assert "managedFields" not in informer.store.get("w")["metadata"]  # type: ignore[index]


async def test_a_resource_must_be_configured_before_its_first_informer() -> None:
    factory = SharedInformerFactory(Client(RestConfig(host="http://127.0.0.1:1")))
    factory.informer_for(WIDGETS)
    with pytest.raises(RuntimeError, match="configure the resource first"):
        factory.configure(WIDGETS, label_selector="owner=me")


async def test_the_manager_waits_past_the_sync_deadline_for_a_resource_not_served_and_readyz_says_why() -> None:
    clock = FakeClock()
    async with fake_api() as (api, client):
        manager = Manager(
            client, ManagerOptions(health_probe_bind_address="127.0.0.1:0", cache_sync_timeout=0.01, clock=clock)
        )
        manager.informers.add_fix_hint(WIDGETS, NOT_SERVED, FIX)
        informer = manager.informers.informer_for(WIDGETS)
        started = asyncio.Event()

        class Controller:
            needs_leader_election = True

            async def run(self) -> None:
                started.set()
                await until_cancelled()

        manager.add(Controller())
        stopping = asyncio.Event()
        run = asyncio.create_task(manager.start(stopping))
        await asyncio.wait_for(manager.health.wait_started(), 5)
        async with aiohttp.ClientSession() as session:

            async def readyz() -> tuple[int, str]:
                async with session.get(f"http://127.0.0.1:{manager.health.port}/readyz?verbose") as resp:
                    return resp.status, await resp.text()

            # The sync deadline is on the fake clock: it passes only once the first list has failed.
            await eventually(lambda: informer.problem is not None, within=30, what="the first failed list")
            await eventually(clock.stepping(lambda: api.lists() >= 2), within=30, what="two failed lists")
            status, text = await readyz()
            assert status == 500
            assert (
                f"[-]informers failed: resource example.com/v1/widgets is not served by the API server; fix: {FIX}"
                in (text.splitlines())
            )
            assert not run.done()
            assert not started.is_set()
            api.served = True
            await eventually(clock.stepping(started.is_set), within=30, what="the controller to start")
            assert (await readyz())[0] == 200
        stopping.set()
        await asyncio.wait_for(run, 30)

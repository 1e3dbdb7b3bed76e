"""Controllers on real informers against a real API server: bursts, retries and conflicts.

Each test runs a SharedInformerFactory and one controller over ConfigMaps in its own namespace (the informer is
scoped to it), with an instrumented reconciler.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import Client, Conflict
from llmaz.runtime.controller import Controller, ControllerBuilder, Request, Result, Scope
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.workqueue import ItemExponentialFailureRateLimiter
from llmaz_dev.testing.manifests import CONFIGMAPS, configmap
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture
async def fast_client(kubeconfig: Path) -> AsyncIterator[Client]:
    client = await Client.from_kubeconfig(kubeconfig, qps=0)  # no client-side limit: a real burst
    yield client
    await client.close()


@contextlib.asynccontextmanager
async def running(factory: SharedInformerFactory, controller: Controller) -> AsyncIterator[None]:
    async with started(factory, controller, within=30):
        yield


def _controller(
    name: str, namespace: str, reconciler: Any, factory: SharedInformerFactory, **options: Any
) -> Controller:
    return (
        ControllerBuilder(name)
        .watches(CONFIGMAPS, _own_key, scope=Scope(namespace=namespace))
        .with_options(needs_leader_election=False, **options)
        .build(reconciler, factory)
    )


def _own_key(obj: dict[str, Any]) -> list[Request]:
    meta = obj["metadata"]
    return [Request(meta["namespace"], meta["name"])]


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Instrumented:
    """Counts reconciles per key and fails the test if a key is ever reconciled by two workers at once."""

    def __init__(self) -> None:
        self.in_flight: set[str] = set()
        self.overlaps: list[str] = []
        self.calls: dict[str, int] = {}

    async def reconcile(self, request: Request) -> Result:
        if request.key in self.in_flight:
            self.overlaps.append(request.key)
        self.in_flight.add(request.key)
        try:
            self.calls[request.key] = self.calls.get(request.key, 0) + 1
            await asyncio.sleep(0.001)  # yield, so concurrent workers interleave
            return Result()
        finally:
            self.in_flight.discard(request.key)


async def test_a_burst_of_2000_objects_is_reconciled_once_each_at_a_time_and_the_metrics_add_up(
    fast_client: Client, namespace: str
) -> None:
    factory = SharedInformerFactory(fast_client)
    reconciler = Instrumented()
    controller = _controller("burst", namespace, reconciler, factory, max_concurrent_reconciles=4)
    keys = {f"{namespace}/cm-{i}" for i in range(2000)}
    async with running(factory, controller):
        gate = asyncio.Semaphore(64)

        async def create(i: int) -> None:
            async with gate:
                await fast_client.create(CONFIGMAPS, configmap(f"cm-{i}", namespace, i=str(i)))

        await asyncio.gather(*(create(i) for i in range(2000)))
        await eventually(lambda: keys <= set(reconciler.calls), within=120, what="every key reconciled")
        await eventually(lambda: len(controller.queue) == 0 and not reconciler.in_flight, within=30)
    assert reconciler.overlaps == []
    reconciles = sum(reconciler.calls.values())
    assert _sample("controller_runtime_reconcile_total", {"controller": "burst", "result": "success"}) == reconciles
    assert _sample("controller_runtime_reconcile_errors_total", {"controller": "burst"}) == 0
    adds = _sample("workqueue_adds_total", {"name": "burst", "controller": "burst"})
    assert reconciles <= adds  # every reconcile was an added key; collapsed adds make adds >= reconciles
    assert _sample("workqueue_depth", {"name": "burst", "controller": "burst", "priority": ""}) == 0


class FailingTwice:
    """Raises for the first two attempts at each key, then succeeds; records when each attempt started."""

    def __init__(self) -> None:
        self.attempts: list[float] = []

    async def reconcile(self, request: Request) -> Result:
        self.attempts.append(time.monotonic())
        if len(self.attempts) <= 2:
            raise RuntimeError(f"transient failure {len(self.attempts)}")
        return Result()


async def test_a_failing_reconcile_is_retried_with_growing_delay_then_forgotten(
    fast_client: Client, namespace: str
) -> None:
    factory = SharedInformerFactory(fast_client)
    reconciler = FailingTwice()
    limiter = ItemExponentialFailureRateLimiter(base=0.3, max_delay=10)
    controller = _controller("retry", namespace, reconciler, factory, rate_limiter=limiter)
    async with running(factory, controller):
        await fast_client.create(CONFIGMAPS, configmap("flaky", namespace))
        await eventually(lambda: len(reconciler.attempts) >= 3, within=30, what="third attempt")
        succeeded = {"controller": "retry", "result": "success"}
        await eventually(lambda: _sample("controller_runtime_reconcile_total", succeeded) == 1, within=30)
        # Nothing is queued or waiting out a delay: no further attempt can come without a new event.
        assert len(controller.queue) == 0
        assert controller.queue.waiting == 0
    first_gap = reconciler.attempts[1] - reconciler.attempts[0]
    second_gap = reconciler.attempts[2] - reconciler.attempts[1]
    assert first_gap >= 0.3
    assert second_gap >= 0.6
    assert len(reconciler.attempts) == 3  # success forgot the key: no further attempts
    assert limiter.num_requeues(Request(namespace, "flaky")) == 0
    assert _sample("controller_runtime_reconcile_errors_total", {"controller": "retry"}) == 2


class StaleWriter:
    """Marks each ConfigMap from the cached copy; the first write is held until the test changes the object, so
    it carries a stale resourceVersion and must be retried against the fresh cache."""

    def __init__(self, client: Client, factory: SharedInformerFactory, namespace: str) -> None:
        self.client = client
        self.store = factory.informer_for(CONFIGMAPS, namespace).store
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.conflicts = 0

    async def reconcile(self, request: Request) -> Result:
        cached = self.store.get(request.key)
        if cached is None or (cached.get("data") or {}).get("marked") == "yes":
            return Result()
        self.holding.set()
        await self.release.wait()
        updated = {**cached, "data": {**(cached.get("data") or {}), "marked": "yes"}}
        try:
            await self.client.update(CONFIGMAPS, updated)
        except Conflict:
            self.conflicts += 1
            raise
        return Result()


async def test_a_conflicting_update_is_retried_and_converges(fast_client: Client, namespace: str) -> None:
    factory = SharedInformerFactory(fast_client)
    reconciler = StaleWriter(fast_client, factory, namespace)
    controller = _controller("conflict", namespace, reconciler, factory)
    async with running(factory, controller):
        await fast_client.create(CONFIGMAPS, configmap("contested", namespace, owner="test"))
        await asyncio.wait_for(reconciler.holding.wait(), 30)  # the reconciler holds a copy, and waits
        live = await fast_client.get(CONFIGMAPS, "contested", namespace)
        await fast_client.update(CONFIGMAPS, {**live, "data": {"owner": "test", "edited": "meanwhile"}})
        reconciler.release.set()

        async def converged() -> bool:
            data = (await fast_client.get(CONFIGMAPS, "contested", namespace)).get("data") or {}
            return data == {"owner": "test", "edited": "meanwhile", "marked": "yes"}

        await eventually(converged, within=30, what="both writes kept")
    assert reconciler.conflicts >= 1

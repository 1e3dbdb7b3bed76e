"""The control loop when the API server misbehaves: gone for a while, or closing every watch the moment it opens.

An outage must not cost more than a few seconds once the server is back, however long it lasted (the informer's
backoff for connection trouble is short and separate from its relist backoff); a server that ends watches at once
must not be asked again hundreds of times a second, yet must keep being asked: the informer never gives up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from llmaz.runtime.cache import SharedInformer
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.cache.reflector import CONNECTION_BACKOFF
from llmaz.runtime.client import Client
from llmaz.runtime.controller import ControllerBuilder, Request, Result, Scope
from llmaz_dev.envtest.control_plane import ControlPlane
from llmaz_dev.testing.manifests import CONFIGMAPS, configmap
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

from .apiproxy import ApiProxy

pytestmark = pytest.mark.integration

OUTAGE = 20.0
RESUME_WITHIN = 5.0
# Watches that the server closes at once: how long they are counted, and what one takes beyond the informer's wait
# (the request through the proxy and back, on a loaded machine).
WATCH_WINDOW = 5.0
WATCH_ROUND_TRIP = 0.5


class Stamped:
    """Records when each key was first reconciled."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}

    async def reconcile(self, request: Request) -> Result:
        self.first.setdefault(request.name, time.monotonic())
        return Result()


def _own_key(obj: dict[str, Any]) -> list[Request]:
    meta = obj["metadata"]
    return [Request(meta["namespace"], meta["name"])]


@contextlib.asynccontextmanager
async def controller_running(client: Client, namespace: str, reconciler: Stamped) -> AsyncIterator[None]:
    factory = SharedInformerFactory(client)
    controller = (
        ControllerBuilder("outage")
        .watches(CONFIGMAPS, _own_key, scope=Scope(namespace=namespace))
        .with_options(needs_leader_election=False)
        .build(reconciler, factory)
    )
    async with started(factory, controller, within=30):
        yield


@pytest.fixture
async def own_control_plane() -> AsyncIterator[ControlPlane]:
    """A control plane of this test's own, on every cluster setting: the test stops its API server."""
    plane = ControlPlane()
    await asyncio.to_thread(plane.start)
    try:
        yield plane
    finally:
        await asyncio.to_thread(plane.stop)


async def test_reconciling_resumes_within_seconds_of_the_api_server_coming_back_from_an_outage(
    own_control_plane: ControlPlane,
) -> None:
    control_plane = own_control_plane
    kubeconfig = control_plane.kubeconfig
    namespace = await asyncio.to_thread(control_plane.create_namespace, "outage")
    reconciler = Stamped()
    async with await Client.from_kubeconfig(kubeconfig) as client, controller_running(client, namespace, reconciler):
        await client.create(CONFIGMAPS, configmap("before", namespace))
        await eventually(lambda: "before" in reconciler.first, within=30, what="the first object reconciled")
        # The event loop keeps running through the outage, so the informer's watch breaks and it retries (and
        # backs off) all along, as it would against a real outage.
        await asyncio.to_thread(control_plane.stop_apiserver)
        await asyncio.sleep(OUTAGE)  # the outage itself
        await asyncio.to_thread(control_plane.start_apiserver)
        back = time.monotonic()
        async with await Client.from_kubeconfig(kubeconfig) as fresh:  # no connections pooled before the outage
            await fresh.create(CONFIGMAPS, configmap("after", namespace))
        await eventually(lambda: "after" in reconciler.first, within=120, what="the new object reconciled")
    resumed = reconciler.first["after"] - back
    assert resumed <= RESUME_WITHIN, f"reconciled {resumed:.1f} s after the API server was back"


async def test_an_informer_keeps_asking_for_watches_the_server_closes_at_once_but_at_most_once_a_second(
    kubeconfig: Path, namespace: str
) -> None:
    # Each such watch counts as connection trouble: the next waits the connection backoff, never more than its cap,
    # so no silence of the informer outlasts a capped wait and a round trip, and the window holds that many watches.
    assert CONNECTION_BACKOFF.cap is not None
    longest_silence = CONNECTION_BACKOFF.cap + WATCH_ROUND_TRIP
    at_least = int(WATCH_WINDOW // longest_silence)
    assert at_least >= 2, "the window must hold at least two of the longest gaps between watches"

    proxy = await ApiProxy.start(kubeconfig)
    proxy.close_watches = True
    try:
        async with Client(proxy.rest_config()) as client:
            informer = SharedInformer.for_resource(client, CONFIGMAPS, namespace)
            async with started(informer):
                await asyncio.wait_for(informer.wait_for_sync(), 30)
                window_start = time.monotonic()
                await asyncio.sleep(WATCH_WINDOW)  # the measurement window
                window_end = time.monotonic()
    finally:
        await proxy.stop()
    watches = [e for e in proxy.exchanges if "watch=true" in e.query and window_start <= e.at < window_end]
    window = f"{len(watches)} watch requests in {window_end - window_start:.1f} s"
    assert len(watches) / (window_end - window_start) <= 1.0, window
    assert len(watches) >= at_least, f"{window}: the informer stopped asking (at least {at_least} expected)"
    asked = [watch.at for watch in watches]
    silences = [later - earlier for earlier, later in zip([window_start, *asked], [*asked, window_end], strict=True)]
    assert max(silences) <= longest_silence, (
        f"{window}: the informer went {max(silences):.1f} s without asking, longer than the backoff's cap"
    )

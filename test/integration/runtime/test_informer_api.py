"""Informers against a real API server: they follow changes, survive an API server restart, and relist after
their resourceVersion expires, always converging on what a fresh list says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from llmaz.runtime.cache import ClientListWatch, DeletedFinalStateUnknown, Obj, SharedInformer
from llmaz.runtime.client import Client, ObjectList
from llmaz.runtime.resource import Resource, object_key
from llmaz_dev.envtest.control_plane import ControlPlane
from llmaz_dev.testing.manifests import CONFIGMAPS, LWS, configmap, leaderworkerset
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

pytestmark = pytest.mark.integration


class Journal:
    """An event handler that records what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.tombstones: list[DeletedFinalStateUnknown] = []

    def on_add(self, obj: dict[str, Any], is_initial_list: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self.tombstones.append(obj)
            self.events.append(("tombstone", obj.key))
        else:
            self.events.append(("delete", obj["metadata"]["name"]))


class CountingListWatch(ClientListWatch):
    def __init__(self, client: Client, resource: Resource, namespace: str) -> None:
        super().__init__(client, resource, namespace)
        self.list_rvs: list[str] = []

    async def list(self, resource_version: str, transform: Callable[[Obj], Obj] | None = None) -> ObjectList:
        self.list_rvs.append(resource_version)
        return await super().list(resource_version, transform)


@contextlib.asynccontextmanager
async def running(informer: SharedInformer) -> AsyncIterator[SharedInformer]:
    async with started(informer):
        await asyncio.wait_for(informer.wait_for_sync(), 30)
        yield informer


async def matches_fresh_list(client: Client, informer: SharedInformer, resource: Resource, ns: str) -> bool:
    fresh = await client.list(resource, ns)
    want = {f"{ns}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in fresh.items}
    have = {object_key(o): o["metadata"]["resourceVersion"] for o in informer.store.list()}
    return want == have


@pytest.mark.parametrize("kind", ["ConfigMap", "LeaderWorkerSet"])
async def test_an_informer_follows_creates_updates_and_deletes(client: Client, namespace: str, kind: str) -> None:
    resource, make = (CONFIGMAPS, configmap) if kind == "ConfigMap" else (LWS, leaderworkerset)
    await client.create(resource, make("before", namespace))
    informer = SharedInformer.for_resource(client, resource, namespace)
    journal = Journal()
    informer.add_event_handler(journal)
    async with running(informer):
        assert journal.events == [("add", "before")]
        await client.create(resource, make("new", namespace))
        await client.patch(resource, "before", {"metadata": {"labels": {"touched": "yes"}}}, namespace)
        await client.delete(resource, "new", namespace)
        await eventually(lambda: len(journal.events) == 4, what="three watch events")
        assert journal.events[1:] == [("add", "new"), ("update", "before"), ("delete", "new")]
        stored = informer.store.get(f"{namespace}/before")
        assert stored is not None
        assert stored["metadata"]["labels"] == {"touched": "yes"}
        assert await matches_fresh_list(client, informer, resource, namespace)


async def test_an_informer_reconnects_after_an_api_server_restart_and_sees_what_changed_meanwhile(
    client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    for name in ("keep", "change", "remove"):
        await client.create(CONFIGMAPS, configmap(name, namespace))
    lw = CountingListWatch(client, CONFIGMAPS, namespace)
    informer = SharedInformer(lw.list, lw.watch, name="restart")
    journal = Journal()
    informer.add_event_handler(journal)
    async with running(informer):
        # The event loop is blocked while the API server restarts and the changes are made, so the informer
        # only finds out once its broken watch is noticed and re-opened.
        control_plane.restart_apiserver()
        control_plane.kubectl("-n", namespace, "label", "configmap", "change", "changed=yes")
        control_plane.kubectl("-n", namespace, "delete", "configmap", "remove")
        control_plane.kubectl("-n", namespace, "create", "configmap", "added")

        async def converged() -> bool:
            return await matches_fresh_list(client, informer, CONFIGMAPS, namespace)

        await eventually(converged, within=60, what="the store to match a fresh list")
        # A restarted API server's watch cache starts at the current revision, so the old resourceVersion may
        # be answered with 410 and a relist (the delete then arrives as a tombstone) or resumed as a watch.
        deleted = ("delete", "remove") in journal.events or ("tombstone", f"{namespace}/remove") in journal.events
        assert deleted
        assert ("add", "added") in journal.events
        assert ("update", "change") in journal.events
        assert lw.list_rvs[0] == "0"


async def test_an_expired_resource_version_leads_to_a_relist_with_tombstones(
    client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    for name in ("keep", "change", "remove"):
        await client.create(CONFIGMAPS, configmap(name, namespace))
    lw = CountingListWatch(client, CONFIGMAPS, namespace)
    informer = SharedInformer(lw.list, lw.watch, name="expiry")
    journal = Journal()
    informer.add_event_handler(journal)
    async with running(informer):
        # A list at resourceVersion "0" may be served slightly stale from the watch cache: wait until the
        # informer holds all three objects before recording the last state it knew of the one to remove.
        keys = {f"{namespace}/{name}" for name in ("keep", "change", "remove")}
        await eventually(lambda: keys <= set(informer.store.keys()), within=30, what="the three objects cached")
        last_known_remove = informer.store.get(f"{namespace}/remove")
        assert last_known_remove is not None
        # Event loop blocked: break the watch, change things, compact etcd past them, and restart again so
        # the API server's watch cache starts after the informer's resourceVersion.
        control_plane.restart_apiserver()
        control_plane.kubectl("-n", namespace, "label", "configmap", "change", "changed=yes")
        control_plane.kubectl("-n", namespace, "delete", "configmap", "remove")
        control_plane.kubectl("-n", namespace, "create", "configmap", "added")
        control_plane.compact_etcd()
        control_plane.restart_apiserver()

        async def converged() -> bool:
            return len(lw.list_rvs) > 1 and await matches_fresh_list(client, informer, CONFIGMAPS, namespace)

        await eventually(converged, within=60, what="a relist and convergence")
        assert lw.list_rvs[0] == "0"
        assert lw.list_rvs[1] != "0"
        assert [t.key for t in journal.tombstones] == [f"{namespace}/remove"]
        assert journal.tombstones[0].obj == last_known_remove
        assert ("add", "added") in journal.events

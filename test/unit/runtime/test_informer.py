"""The shared informer's contract: store before handlers, ordering, initial-list flag, late handlers, tombstones."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmaz.runtime.cache import DeletedFinalStateUnknown, SharedInformer, SharedInformerFactory
from llmaz.runtime.client import Client, Expired, RestConfig
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.listwatch import ScriptedListWatch, event, obj
from llmaz_dev.testing.runnables import started, stop
from llmaz_dev.testing.waiting import eventually


class Recorder:
    """Records (kind, name, rv[, extra]) per call; optionally reads the store on each event."""

    def __init__(self, informer: SharedInformer | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.objects: list[Any] = []
        self._informer = informer
        self.seen_in_store: list[bool] = []

    def _check_store(self, o: dict[str, Any], present: bool) -> None:
        if self._informer is not None:
            key = f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            self.seen_in_store.append((self._informer.store.get(key) is not None) == present)

    def on_add(self, o: dict[str, Any], is_initial_list: bool) -> None:
        self.objects.append(o)
        self._check_store(o, True)
        self.calls.append(("add", o["metadata"]["name"], o["metadata"]["resourceVersion"], is_initial_list))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.objects.append(new)
        self._check_store(new, True)
        self.calls.append(("update", new["metadata"]["name"], old["metadata"]["resourceVersion"],
                           new["metadata"]["resourceVersion"]))  # fmt: skip

    def on_delete(self, o: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        self.objects.append(o)
        if isinstance(o, DeletedFinalStateUnknown):
            self.calls.append(("tombstone", o.key, o.obj["metadata"]["resourceVersion"]))
        else:
            self._check_store(o, False)
            self.calls.append(("delete", o["metadata"]["name"], o["metadata"]["resourceVersion"]))


@contextlib.asynccontextmanager
async def running(informer: SharedInformer, lw: ScriptedListWatch, clock: FakeClock) -> AsyncIterator[None]:
    async with started(informer):
        yield
        await eventually(clock.stepping(lw.exhausted.is_set), within=10, what="the list-watch script to be consumed")


def make(lw: ScriptedListWatch, clock: FakeClock, **kw: Any) -> SharedInformer:
    return SharedInformer(lw.list, lw.watch, name="test", clock=clock, **kw)


async def test_handlers_hear_the_initial_list_then_watch_events_in_order_after_the_store_changes() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1"), obj("b", "2")], "5")
    lw.add_watch(event("ADDED", "c", "6"), event("MODIFIED", "a", "7"), event("DELETED", "b", "8"))
    informer = make(lw, clock)
    first, second = Recorder(informer), Recorder(informer)
    informer.add_event_handler(first)
    informer.add_event_handler(second)
    async with running(informer, lw, clock):
        pass
    assert first.calls == [
        ("add", "a", "1", True),
        ("add", "b", "2", True),
        ("add", "c", "6", False),
        ("update", "a", "1", "7"),
        ("delete", "b", "8"),
    ]
    assert second.calls == first.calls
    assert all(first.seen_in_store)
    assert sorted(informer.store.keys()) == ["default/a", "default/c"]


async def test_has_synced_turns_true_once_the_first_list_is_delivered() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock)
    informer = make(lw, clock)
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(lw.exhausted.wait(), 5)  # the list call is parked: nothing listed yet
    assert not informer.has_synced()
    await stop(task)

    lw2 = ScriptedListWatch(clock).add_list([obj("a", "1")], "2")
    informer2 = make(lw2, clock)
    async with running(informer2, lw2, clock):
        await asyncio.wait_for(informer2.wait_for_sync(), 5)
        assert informer2.has_synced()


async def test_a_handler_added_after_sync_first_gets_synthetic_adds_for_cached_objects() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1")], "5")
    informer = make(lw, clock)
    async with running(informer, lw, clock):
        await informer.wait_for_sync()
        late = Recorder()
        informer.add_event_handler(late)
        assert late.calls == [("add", "a", "1", True)]


async def test_a_transform_shapes_what_the_store_and_the_handlers_see_from_lists_and_watches() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1", data={"big": "x"})], "5")
    lw.add_watch(event("ADDED", "b", "6", data={"big": "y"}), event("DELETED", "a", "7", data={"big": "x"}))
    informer = make(lw, clock)

    def slim(o: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": o["metadata"], "slim": True}

    informer.set_transform(slim)
    recorder = Recorder(informer)
    informer.add_event_handler(recorder)
    async with running(informer, lw, clock):
        pass
    assert recorder.calls == [("add", "a", "1", True), ("add", "b", "6", False), ("delete", "a", "7")]
    assert all(o == {"metadata": o["metadata"], "slim": True} for o in recorder.objects)
    assert informer.store.list() == [{"metadata": obj("b", "6")["metadata"], "slim": True}]
    with pytest.raises(RuntimeError, match="before it starts"):
        informer.set_transform(slim)


async def test_a_relist_after_expiry_emits_the_difference_with_tombstones_for_missed_deletes() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1"), obj("b", "2")], "5")
    lw.add_watch(event("MODIFIED", "b", "6"), Expired(410, "Expired", "too old resource version"))
    lw.add_list([obj("a", "9"), obj("c", "8")], "10")
    informer = make(lw, clock)
    rec = Recorder()
    informer.add_event_handler(rec)
    async with running(informer, lw, clock):
        pass
    assert rec.calls[3:] == [
        ("tombstone", "default/b", "6"),
        ("add", "c", "8", False),
        ("update", "a", "1", "9"),
    ]
    assert sorted(informer.store.keys()) == ["default/a", "default/c"]


async def test_a_failing_handler_does_not_stop_the_others_or_the_informer() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1")], "5").add_watch(event("ADDED", "b", "6"))
    informer = make(lw, clock)

    class Broken(Recorder):
        def on_add(self, o: dict[str, Any], is_initial_list: bool) -> None:
            raise RuntimeError("handler bug")

    rec = Recorder()
    informer.add_event_handler(Broken())
    informer.add_event_handler(rec)
    async with running(informer, lw, clock):
        pass
    assert [c[1] for c in rec.calls] == ["a", "b"]


async def test_a_delete_of_an_object_never_cached_is_not_reported() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([], "5").add_watch(event("DELETED", "ghost", "6"))
    informer = make(lw, clock)
    rec = Recorder()
    informer.add_event_handler(rec)
    async with running(informer, lw, clock):
        pass
    assert rec.calls == []


async def test_resync_replays_every_cached_object_as_an_update_to_itself() -> None:
    clock = FakeClock()
    lw = ScriptedListWatch(clock).add_list([obj("a", "1")], "5")
    informer = make(lw, clock, resync_period=60.0)
    rec = Recorder()
    informer.add_event_handler(rec)
    task = asyncio.create_task(informer.run())
    await informer.wait_for_sync()
    await clock.wait_for_sleepers()
    clock.step(60.0)
    await clock.wait_for_sleepers()
    await stop(task)
    assert rec.calls == [("add", "a", "1", True), ("update", "a", "1", "1")]


def test_the_factory_shares_one_informer_per_resource_and_scope() -> None:
    client = Client(RestConfig(host="http://127.0.0.1:1"))
    factory = SharedInformerFactory(client)
    pods = Resource("", "v1", "pods", "Pod", namespaced=True)
    cms = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
    assert factory.informer_for(pods) is factory.informer_for(pods)
    assert factory.informer_for(pods, "ns") is factory.informer_for(pods, namespace="ns")
    distinct = {
        id(factory.informer_for(pods)),
        id(factory.informer_for(pods, "ns")),
        id(factory.informer_for(pods, label_selector="app=x")),
        id(factory.informer_for(pods, field_selector="metadata.name=x")),
        id(factory.informer_for(cms)),
    }
    assert len(distinct) == 5
    assert len(factory.informers) == 5


async def test_the_factory_sync_wait_names_the_informers_that_did_not_sync() -> None:
    from llmaz.runtime.cache import CacheSyncTimeoutError

    client = Client(RestConfig(host="http://127.0.0.1:1"))
    factory = SharedInformerFactory(client)
    factory.informer_for(Resource("", "v1", "pods", "Pod", namespaced=True), "ns")
    with pytest.raises(CacheSyncTimeoutError, match=r"pods\.v1/ns"):
        await factory.wait_for_sync(0.05)

"""Events reach the API server as events.k8s.io/v1 objects and repeats are aggregated into a series."""

from __future__ import annotations

import asyncio

import pytest

from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS, NORMAL, WARNING, EventBroadcaster
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.manifests import CONFIGMAPS, configmap
from llmaz_dev.testing.runnables import stop
from llmaz_dev.testing.waiting import eventually

pytestmark = pytest.mark.integration

CORE_EVENTS = Resource("", "v1", "events", "Event", namespaced=True)


async def test_events_are_written_and_repeats_increment_one_series(client: Client, namespace: str) -> None:
    broadcaster = EventBroadcaster(client)
    sender = asyncio.create_task(broadcaster.run())
    recorder = broadcaster.recorder("runtime-test")
    cm = await client.create(CONFIGMAPS, configmap("subject", namespace))
    for _ in range(3):
        recorder.event(cm, NORMAL, "Synced", "all good")
    recorder.event(cm, WARNING, "Failed", "something broke", action="Reconcile")

    async def written() -> bool:
        events = (await client.list(EVENTS, namespace)).items
        synced = [e for e in events if e["reason"] == "Synced"]
        return len(events) == 2 and bool(synced) and synced[0].get("series", {}).get("count") == 3

    await eventually(written, within=20, what="two events, one with a series of 3")
    events = {e["reason"]: e for e in (await client.list(EVENTS, namespace)).items}
    synced, failed = events["Synced"], events["Failed"]
    assert synced["regarding"]["uid"] == cm["metadata"]["uid"]
    assert synced["regarding"]["kind"] == "ConfigMap"
    assert (synced["type"], synced["note"], synced["action"]) == ("Normal", "all good", "Synced")
    assert synced["reportingController"] == "runtime-test"
    assert (failed["type"], failed["action"], failed.get("series")) == ("Warning", "Reconcile", None)
    # The same Events through core/v1, as `kubectl describe` finds them.
    core = await client.list(CORE_EVENTS, namespace, field_selector="involvedObject.name=subject")
    assert sorted(e["reason"] for e in core.items) == ["Failed", "Synced"]
    await stop(sender)
    assert broadcaster.dropped == 0

"""The `-lb` activator against fake informers and a fake API, and the activator listener.

The fake API writes EndpointSlices into the fake slice informer the way the API server and the gateway's
informer would (uid and resourceVersion set, the cache's transform applied), so the catalog sees each write as
an event. A test plays the EndpointSlice controller (the engine's slice) and the gateway's rollout (its own
Service's slice).
"""

from __future__ import annotations

import asyncio
import copy
import functools
from typing import Any, cast

from llmaz.apis import constants as c
from llmaz.apis.resources import ENDPOINT_SLICES
from llmaz.gateway.proxy.auth import ApiKeys
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.scaling.activator import Activator, ActivatorOptions, activator_controller
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import error_from_status
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import EventRecorder
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.runnables import stop

from .support import (
    NAMESPACE,
    WAIT,
    Cluster,
    endpoint_slice,
    engines,
    lb_service,
    open_model,
    playground,
    running_gateway,
)
from .test_waker import Events, FakeApi, engine_starts

GATEWAY_SERVICE = "llmaz-system/llmaz-gateway"
SLICE_KEY = f"{NAMESPACE}/p-lb-activator"
CHAT = "/v1/chat/completions"
compact = functools.partial(routes.compact_endpoint_slice, keep={GATEWAY_SERVICE})


class FakeSliceApi:
    """`Client.create/get/update/delete` for EndpointSlices, applied to the slice informer as the API server
    and the gateway's informer (with its transform) would; `writes` records each applied write."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.live: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, list[str]]] = []  # (verb, key, addresses)
        self.written = asyncio.Event()
        self.version = 0

    def put(self, obj: dict[str, Any]) -> None:
        """Store `obj` as the API server holds it (the test's own slices, or a write)."""
        self.version += 1
        obj["metadata"].setdefault("uid", f"uid-{self.version}")
        obj["metadata"]["resourceVersion"] = str(self.version)
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        self.live[key] = obj
        self.cluster.slices.update(compact(copy.deepcopy(obj)))

    def remove(self, key: str) -> None:
        obj = self.live.pop(key)
        self.cluster.slices.delete(compact(obj))

    def _record(self, verb: str, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        addresses = sorted(ep["addresses"][0] for ep in obj.get("endpoints") or [])
        self.writes.append((verb, key, addresses))
        self.written.set()

    async def create(self, resource: Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        assert resource == ENDPOINT_SLICES
        await asyncio.sleep(0)  # a real call yields; concurrent callers interleave here
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if key in self.live:
            raise error_from_status(409, {"kind": "Status", "reason": "AlreadyExists"})
        stored = copy.deepcopy(obj)
        stored["metadata"].pop("uid", None)
        self.put(stored)
        self._record("create", stored)
        return copy.deepcopy(stored)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        await asyncio.sleep(0)
        found = self.live.get(f"{namespace}/{name}")
        if found is None:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})
        return copy.deepcopy(found)

    async def update(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        current = self.live.get(key)
        if current is None:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise error_from_status(409, {"kind": "Status", "reason": "Conflict"})
        self.put(copy.deepcopy(obj))
        self._record("update", obj)
        return copy.deepcopy(obj)

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, *, preconditions: dict[str, str] | None
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        key = f"{namespace}/{name}"
        current = self.live.get(key)
        if current is None:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})
        if preconditions and preconditions.get("uid") != current["metadata"]["uid"]:
            raise error_from_status(409, {"kind": "Status", "reason": "Conflict"})
        self.remove(key)
        self._record("delete", current)
        return {"kind": "Status", "status": "Success"}


def asleep(name: str = "p", model: str = "m") -> dict[str, Any]:
    found = playground(name, model)
    found["metadata"] |= {"uid": f"uid-{name}", "creationTimestamp": "2027-01-15T07:00:00Z"}
    found["metadata"]["annotations"] = {c.SCALE_TO_ZERO_AFTER_ANNOTATION: "5m"}
    found["spec"]["replicas"] = 0
    return found


def gateway_pods(*addresses: str, terminating: tuple[str, ...] = ()) -> dict[str, Any]:
    pods = [(a, True, False) for a in addresses] + [(a, False, True) for a in terminating]
    found = endpoint_slice("llmaz-gateway-abcde", "llmaz-gateway", 8000, *pods, namespace="llmaz-system")
    found["addressType"] = "IPv4"
    return found


def world(*gateway_addresses: str) -> tuple[Cluster, FakeSliceApi, Events, Catalog]:
    cluster = Cluster().synced()
    api, events, catalog = FakeSliceApi(cluster), Events(), cluster.catalog()
    cluster.open_models.add(open_model("m"))
    cluster.core_services.add(lb_service("p"))
    api.put(gateway_pods(*gateway_addresses))
    cluster.playgrounds.add(asleep())
    return cluster, api, events, catalog


def activator(api: FakeSliceApi, catalog: Catalog, events: Events, port: int = 8001) -> Activator:
    options = ActivatorOptions(port=port, gateway_service=GATEWAY_SERVICE)
    return Activator(cast(Client, api), catalog, cast(EventRecorder, events), options)


P = Request(NAMESPACE, "p")  # the Playground's key
DONE = Result()


def reasons(events: Events) -> list[str]:
    return [reason for _, _, reason, _ in events.recorded]


async def test_a_sleeping_playground_gets_a_slice_of_the_ready_gateway_pods_and_one_event() -> None:
    _, api, events, catalog = world("10.1.0.1", "10.1.0.2")
    loop = activator(api, catalog, events)
    for _ in range(3):
        assert await loop.reconcile(P) == DONE
    assert api.writes == [("create", SLICE_KEY, ["10.1.0.1", "10.1.0.2"])]
    created = api.live[SLICE_KEY]
    assert created["ports"] == [{"name": "http", "port": 8001, "protocol": "TCP"}]
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    assert events.recorded == [
        (
            "p",
            "Normal",
            "ActivatorEnabled",
            "Created EndpointSlice p-lb-activator with 2 llmaz-gateway address(es) on port 8001 (http): "
            "direct requests to p-lb are held while the model wakes",
        )
    ]


async def test_two_replicas_create_the_slice_once_and_record_one_event() -> None:
    _, api, events, catalog = world("10.1.0.1")
    first, second = activator(api, catalog, events), activator(api, catalog, events)
    assert list(await asyncio.gather(first.reconcile(P), second.reconcile(P))) == [DONE, DONE]
    assert [verb for verb, _, _ in api.writes] == ["create"]
    assert reasons(events) == ["ActivatorEnabled"]


async def controller_writes_twice(api: FakeSliceApi, catalog: Catalog, events: Events, change: dict[str, Any]) -> None:
    """Run the activator's controller until its first write, `api.put(change)`, then until its next write."""
    controller = activator_controller(activator(api, catalog, events), catalog)
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(api.written.wait(), WAIT)
        api.written.clear()
        api.put(change)
        await asyncio.wait_for(api.written.wait(), WAIT)
    finally:
        await stop(task, WAIT)


async def test_a_gateway_rollout_updates_the_addresses_at_once_without_waiting_for_a_resync() -> None:
    _, api, events, catalog = world("10.1.0.1", "10.1.0.2")
    # The rollout: a new pod is ready, the old ones terminate.
    await controller_writes_twice(api, catalog, events, gateway_pods("10.1.0.7", terminating=("10.1.0.1", "10.1.0.2")))
    assert api.writes == [
        ("create", SLICE_KEY, ["10.1.0.1", "10.1.0.2"]),
        ("update", SLICE_KEY, ["10.1.0.7"]),
    ]
    assert reasons(events) == ["ActivatorEnabled"]  # an update is no transition


async def test_the_slice_is_removed_once_the_model_is_ready_with_one_event_and_back_when_it_sleeps() -> None:
    _, api, events, catalog = world("10.1.0.1")
    loop = activator(api, catalog, events)
    assert await loop.reconcile(P) == DONE
    api.put(endpoint_slice("p-lb-xyz12", "p-lb", 8080, ("10.0.0.5", True, False)))  # the engine is ready
    for _ in range(2):
        assert await loop.reconcile(P) == DONE
    assert SLICE_KEY not in api.live
    assert reasons(events) == ["ActivatorEnabled", "ActivatorRemoved"]
    assert events.recorded[-1][3] == "Deleted EndpointSlice p-lb-activator: the Playground has a ready endpoint"
    api.put(endpoint_slice("p-lb-xyz12", "p-lb", 8080, ("10.0.0.5", True, True)))  # asleep again: terminating
    assert await loop.reconcile(P) == DONE
    assert SLICE_KEY in api.live
    assert reasons(events) == ["ActivatorEnabled", "ActivatorRemoved", "ActivatorEnabled"]


async def test_a_deletion_two_replicas_race_for_succeeds_once() -> None:
    cluster, api, events, catalog = world("10.1.0.1")
    assert await activator(api, catalog, events).reconcile(P) == DONE
    opted_out = asleep()
    del opted_out["metadata"]["annotations"]
    cluster.playgrounds.update(opted_out)
    first, second = activator(api, catalog, events), activator(api, catalog, events)
    assert list(await asyncio.gather(first.reconcile(P), second.reconcile(P))) == [DONE, DONE]
    assert [verb for verb, _, _ in api.writes] == ["create", "delete"]
    assert reasons(events) == ["ActivatorEnabled", "ActivatorRemoved"]
    assert "did not opt in" in events.recorded[-1][3]


async def test_with_the_activator_disabled_a_pass_removes_what_an_earlier_run_left() -> None:
    _, api, events, catalog = world("10.1.0.1")
    assert await activator(api, catalog, events).reconcile(P) == DONE
    assert await activator(api, catalog, events, port=0).reconcile(P) == DONE
    assert SLICE_KEY not in api.live
    assert events.recorded[-1][2:] == (
        "ActivatorRemoved",
        "Deleted EndpointSlice p-lb-activator: the activator is disabled",
    )


async def test_a_slice_of_its_name_managed_by_someone_else_is_never_updated_or_deleted() -> None:
    cluster, api, events, catalog = world("10.1.0.1")
    # Managed by "x", with no ready endpoint (a ready one would count as the Playground's own: nothing wanted).
    theirs = endpoint_slice("p-lb-activator", "p-lb", 9999, ("10.9.9.9", False, None))
    api.put(theirs)
    loop = activator(api, catalog, events)
    for _ in range(2):
        assert await loop.reconcile(P) == DONE
    ready = endpoint_slice("p-lb-xyz12", "p-lb", 8080, ("10.0.0.5", True, False))
    api.put(ready)  # now not wanted at all: still not deleted
    assert await loop.reconcile(P) == DONE
    assert api.writes == []
    assert api.live[SLICE_KEY]["ports"][0]["port"] == 9999
    assert reasons(events) == ["ActivatorBlocked"]
    assert cluster.slices.store.get(SLICE_KEY) is not None


async def test_a_slice_taken_over_after_the_cache_saw_it_is_not_written() -> None:
    _, api, events, catalog = world("10.1.0.1")
    assert await activator(api, catalog, events).reconcile(P) == DONE
    # Someone else relabels it on the server; the cache has not seen that yet.
    api.live[SLICE_KEY]["metadata"]["labels"][routes.MANAGED_BY_LABEL] = "someone-else"
    api.live[SLICE_KEY]["metadata"]["resourceVersion"] = "99"
    api.cluster.slices.store.objects["llmaz-system/llmaz-gateway-abcde"]["endpoints"] = []  # wants an update
    api.version = 100
    assert await activator(api, catalog, events).reconcile(P) == DONE
    assert [verb for verb, _, _ in api.writes] == ["create"]


async def test_someone_elses_slice_of_its_name_outside_the_cache_is_read_when_the_create_is_refused() -> None:
    _, api, events, catalog = world("10.1.0.1")
    # Not labelled as llmaz's or the activator's: the gateway's informers never select it.
    api.live[SLICE_KEY] = endpoint_slice("p-lb-activator", "other", 9999, ("10.9.9.9", True, None))
    loop = activator(api, catalog, events)
    for _ in range(2):
        assert await loop.reconcile(P) == DONE
    assert api.writes == []
    assert reasons(events) == ["ActivatorBlocked"]  # once


async def test_the_slice_of_a_deleted_playground_is_deleted_without_an_event() -> None:
    cluster, api, events, catalog = world("10.1.0.1")
    loop = activator(api, catalog, events)
    assert await loop.reconcile(P) == DONE
    cluster.playgrounds.delete(asleep())
    assert await loop.reconcile(P) == DONE
    assert [verb for verb, _, _ in api.writes] == ["create", "delete"]
    assert reasons(events) == ["ActivatorEnabled"]


async def test_the_controller_follows_the_engine_becoming_ready_through_the_lb_slices() -> None:
    _, api, events, catalog = world("10.1.0.1")
    engine_ready = endpoint_slice("p-lb-xyz12", "p-lb", 8080, ("10.0.0.5", True, False))
    await controller_writes_twice(api, catalog, events, engine_ready)
    assert [verb for verb, _, _ in api.writes] == ["create", "delete"]
    assert reasons(events) == ["ActivatorEnabled", "ActivatorRemoved"]


async def test_a_request_to_the_activator_port_for_a_sleeping_model_is_held_until_it_wakes() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(asleep())
        api, events, catalog = FakeApi(cluster.playgrounds), Events(), cluster.catalog()
        waker = Waker(catalog, PlaygroundScale(cast(Client, api), cast(EventRecorder, events)))
        api.on_scaled.append(engine_starts(cluster, engine.endpoint))
        options = GatewayOptions(activator_address="127.0.0.1:0")
        async with running_gateway(cluster, options, catalog=catalog, waker=waker) as gw:
            assert gw.gateway.activator_port not in (None, gw.gateway.port)
            url = f"http://127.0.0.1:{gw.gateway.activator_port}"
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            answers = await asyncio.gather(*(gw.session.post(url + CHAT, json=body) for _ in range(5)))
            statuses = [resp.status for resp in answers]
            for resp in answers:
                resp.release()
            async with gw.session.get(url + "/v1/models") as listed:
                models = await listed.json()
        assert statuses == [200] * 5
        assert api.scaled == [("p", 1)]
        assert [reason for _, _, reason, _ in events.recorded] == ["ScaledFromZero"]
        assert len(engine.requests) == 5
        assert [m["id"] for m in models["data"]] == ["m"]
        assert gw.sample("llmaz_gateway_requests_total", model="m", code="200") == 5


async def test_the_activator_port_asks_for_the_same_api_keys(tmp_path: Any) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text("sk-a\n")
    keys = ApiKeys(keys_file)
    keys.load()
    cluster = Cluster().synced()
    options = GatewayOptions(activator_address="127.0.0.1:0")
    async with running_gateway(cluster, options, api_keys=keys) as gw:
        url = f"http://127.0.0.1:{gw.gateway.activator_port}/v1/models"
        async with gw.session.get(url) as refused:
            assert refused.status == 401
        async with gw.session.get(url, headers={"Authorization": "Bearer sk-a"}) as accepted:
            assert accepted.status == 200

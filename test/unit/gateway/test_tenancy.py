"""Namespaces are tenants: a model is routed to the namespace that claimed it first, never to another namespace's
Playgrounds without the OpenModel's `llmaz.io/serve-across-namespaces: "true"` (docs/tenancy.md)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from llmaz.apis import constants as c
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.routes import Backend
from llmaz.gateway.scaling import activation
from llmaz.gateway.scaling.activator import Activator, ActivatorOptions, activator_controller
from llmaz.runtime.controller import Request, Result
from llmaz_dev.testing.runnables import stop

from .support import (
    WAIT,
    Cluster,
    endpoint_slice,
    engines,
    inference_service,
    lb_service,
    open_model,
    playground,
    refused_endpoint,
    running_gateway,
)
from .test_waker import asleep, setup

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "a prompt for team a"}]}
FIRST, LATER = "2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z"


def pooled(model: str) -> dict[str, Any]:
    found = open_model(model)
    found["metadata"]["annotations"] = {c.SERVE_ACROSS_NAMESPACES_ANNOTATION: "true"}
    return found


def test_a_model_routes_only_to_the_namespace_that_claimed_it_first() -> None:
    table = routes.route_table(
        [playground("copy", "m", namespace="b", created=LATER)],
        [inference_service("demo", "m", namespace="a", created=FIRST), inference_service("other", "m", namespace="a")],
    )
    # Every claimant of the owning namespace is routed, however young; the other namespace's are not.
    assert table == {"m": (Backend("a", "demo-lb"), Backend("a", "other-lb"))}


def test_the_oldest_claimant_decides_whatever_the_namespace_names_and_a_tie_goes_to_the_first_name() -> None:
    older_b = [playground("p", "m", namespace="a", created=LATER), playground("p", "m", namespace="b", created=FIRST)]
    assert routes.route_table(older_b, []) == {"m": (Backend("b", "p-lb"),)}
    tie = [playground("p", "m", namespace="b", created=FIRST), playground("p", "m", namespace="a", created=FIRST)]
    assert routes.route_table(tie, []) == {"m": (Backend("a", "p-lb"),)}


def test_with_the_open_models_opt_in_every_namespace_is_pooled() -> None:
    claimants = [playground("p", "m", namespace="a", created=FIRST), playground("q", "m", namespace="b", created=LATER)]
    models = {"m": pooled("m"), "n": open_model("n")}
    assert routes.route_table(claimants, [], models.get) == {"m": (Backend("a", "p-lb"), Backend("b", "q-lb"))}


def two_teams(cluster: Cluster, first: Any, copy: Any) -> None:
    """Team a serves `m` first; team b makes a copy of its Playground later, in its own namespace."""
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(playground("demo", "m", namespace="a", created=FIRST))
    cluster.playgrounds.add(playground("demo", "m", namespace="b", created=LATER))
    cluster.slices.add(endpoint_slice("demo-lb-1", "demo-lb", first.port, (first.address, True, False), namespace="a"))
    cluster.slices.add(endpoint_slice("demo-lb-1", "demo-lb", copy.port, (copy.address, True, False), namespace="b"))


async def test_a_second_namespaces_copy_never_receives_a_request_even_when_the_owners_engine_fails() -> None:
    async with engines(1) as (copy,):
        with refused_endpoint() as first:
            cluster = Cluster().synced()
            two_teams(cluster, first, copy.endpoint)
            async with running_gateway(cluster) as gw:
                answers = [await gw.post(CHAT, BODY) for _ in range(3)]
    assert all(status >= 500 for status, _ in answers)  # retried on no other namespace's endpoint
    assert copy.requests == []


async def test_with_the_opt_in_the_second_namespaces_playground_receives_requests() -> None:
    async with engines(1) as (copy,):
        with refused_endpoint() as first:
            cluster = Cluster().synced()
            two_teams(cluster, first, copy.endpoint)
            async with running_gateway(cluster) as gw:
                cluster.open_models.update(pooled("m"))
                status, _ = await gw.post(CHAT, BODY)
    assert status == 200
    assert len(copy.requests) == 1


def test_the_routes_follow_the_opt_in_and_the_owners_deletion() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    with refused_endpoint() as first, refused_endpoint() as copy:
        two_teams(cluster, first, copy)
        assert catalog.endpoints("m") == [first]
        assert [pg["metadata"]["namespace"] for pg in catalog.playgrounds_serving("m")] == ["a"]
        cluster.open_models.update(pooled("m"))
        assert sorted(catalog.endpoints("m")) == sorted([first, copy])
        cluster.open_models.update(open_model("m"))
        assert catalog.endpoints("m") == [first]
        cluster.playgrounds.delete_unknown("a/demo")
        assert catalog.endpoints("m") == [copy]
        assert [pg["metadata"]["namespace"] for pg in catalog.playgrounds_serving("m")] == ["b"]


async def test_a_request_wakes_only_the_owning_namespaces_sleeping_playground() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        owner, copy = asleep("owner", "m"), asleep("copy", "m")
        owner["metadata"].update(namespace="a", creationTimestamp=FIRST)
        copy["metadata"].update(namespace="b", creationTimestamp=LATER)
        cluster.playgrounds.add(owner)
        cluster.playgrounds.add(copy)
        scaling, api, _, catalog = setup(cluster)
        api.on_scaled.append(engine_starts_in(cluster, engine.endpoint, "a"))
        async with running_gateway(cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight) as gw:
            status, _ = await gw.post(CHAT, BODY)
        assert status == 200
        assert api.scaled == [("owner", 1)]


def engine_starts_in(cluster: Cluster, endpoint: Any, namespace: str) -> Any:
    """Once a Playground of `namespace` has a replica, an endpoint for it becomes ready (a moment later)."""

    def started(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if obj["spec"]["replicas"] > 0 and meta["namespace"] == namespace:
            ready = (endpoint.address, True, False)
            slice_ = endpoint_slice("x", f"{meta['name']}-lb", endpoint.port, ready, namespace=namespace)
            asyncio.get_running_loop().call_soon(cluster.slices.add, slice_)

    return started


def test_no_activator_slice_is_wanted_for_a_playground_whose_model_another_namespace_owns() -> None:
    copy = asleep("copy", "m")
    copy["metadata"].update(namespace="b", uid="u")
    lb = lb_service("copy", ("http", 8080), namespace="b")
    assert activation.desired_slice(copy, lb, [], [], 8001).slice is not None
    refused = activation.desired_slice(copy, lb, [], [], 8001, routed=False)
    assert refused.slice is None
    assert "another namespace" in refused.reason


async def test_the_owners_requests_keep_only_the_owner_awake() -> None:
    cluster = Cluster().synced()
    owner, copy = asleep("owner", "m", replicas=1), asleep("copy", "m", replicas=1)  # created in the same second
    owner["metadata"]["namespace"], copy["metadata"]["namespace"] = "a", "b"  # the tie goes to a
    cluster.playgrounds.add(owner)
    cluster.playgrounds.add(copy)
    scaling, api, _, _ = setup(cluster)
    scaling.in_flight.started("m")
    await scaling.check()
    assert api.scaled == [("copy", 0)]


def test_the_engines_of_a_copy_the_model_is_not_routed_to_are_still_read_for_their_own_activity() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    with refused_endpoint() as first, refused_endpoint() as copy:
        two_teams(cluster, first, copy)
        assert catalog.endpoints("m") == [first]
        assert sorted(catalog.routed_endpoints()) == sorted([first, copy])  # what the engine signals scrape


class Keys:
    """A reconciler that records the keys it is given."""

    def __init__(self) -> None:
        self.options = ActivatorOptions(gateway_service="llmaz-system/llmaz-gateway")
        self.seen: list[Request] = []
        self._arrived = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        self._arrived.set()
        return Result()

    async def queued_again(self, key: Request) -> None:
        """Until `key` is reconciled once more from now on."""
        start = len(self.seen)
        while key not in self.seen[start:]:
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), WAIT)


async def test_another_namespaces_claim_or_the_opt_in_queues_the_activator_for_a_playground_of_the_model() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(asleep("p", "m"))
    catalog, keys, p = cluster.catalog(), Keys(), Request("ns", "p")
    task = asyncio.create_task(activator_controller(cast(Activator, keys), catalog).run())
    try:
        await keys.queued_again(p)  # its own creation
        # No event of p itself: whether p is routed to, and so wants a slice, changed with these.
        cluster.playgrounds.add(playground("older", "m", namespace="a", created="2020-01-01T00:00:00Z"))
        await keys.queued_again(p)
        cluster.open_models.update(pooled("m"))
        await keys.queued_again(p)
    finally:
        await stop(task, WAIT)

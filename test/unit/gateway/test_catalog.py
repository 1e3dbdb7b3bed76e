"""The catalog: routes follow the informers' contents, endpoints are read per lookup, sync gates readiness."""

from __future__ import annotations

import asyncio

import pytest

from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.waiting import eventually

from .support import (
    NAMESPACE,
    VLLM_CAPABILITIES,
    WAIT,
    Cluster,
    endpoint_slice,
    inference_service,
    lb_service,
    open_model,
    playground,
)


def test_a_model_routes_to_the_ready_endpoints_of_its_lb_service_only() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.slices.add(endpoint_slice("p-lb-1", "p-lb", 8080, ("10.0.0.1", True, False), ("10.0.0.2", False, False)))
    cluster.slices.add(endpoint_slice("p-1", "p", 8080, ("10.0.0.3", True, False)))  # a look-alike Service
    cluster.slices.add(endpoint_slice("p-lb-1", "p-lb", 8080, ("10.0.0.4", True, False), namespace="other"))
    assert catalog.models() == ["m"]
    assert catalog.endpoints("m") == [Endpoint("10.0.0.1", 8080)]
    assert catalog.endpoints("unknown") == []
    assert not catalog.serves("unknown")


def test_routes_follow_adds_updates_and_deletes_of_playgrounds_and_services() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    assert catalog.models() == []
    cluster.services.add(inference_service("s", "a"))
    assert catalog.models() == ["a"]
    cluster.services.update(inference_service("s", "b"))
    assert catalog.models() == ["b"]
    cluster.playgrounds.add(playground("p", "c"))
    assert catalog.models() == ["b", "c"]
    cluster.services.delete(inference_service("s", "b"))
    cluster.playgrounds.delete_unknown("ns/p")
    assert catalog.models() == []


def test_endpoints_follow_the_slices_without_any_event_handler() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    assert catalog.endpoints("m") == []
    cluster.slices.add(endpoint_slice("x", "p-lb", 8080, ("10.0.0.1", True, False)))
    assert catalog.endpoints("m") == [Endpoint("10.0.0.1", 8080)]
    cluster.slices.update(endpoint_slice("x", "p-lb", 8080, ("10.0.0.1", False, True)))
    assert catalog.endpoints("m") == []


def test_routed_endpoints_are_every_served_models_ready_endpoints_each_once() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "a"))
    cluster.services.add(inference_service("p", "a"))  # the Service the Playground owns: the same backend
    cluster.services.add(inference_service("s", "b"))
    cluster.slices.add(endpoint_slice("p-lb-1", "p-lb", 8080, ("10.0.0.2", True, False), ("10.0.0.3", False, False)))
    cluster.slices.add(endpoint_slice("s-lb-1", "s-lb", 8000, ("10.0.0.1", True, False), ("10.0.0.2", True, False)))
    cluster.slices.add(endpoint_slice("x-lb-1", "x-lb", 8080, ("10.0.0.9", True, False)))  # nothing serves x-lb
    assert catalog.routed_endpoints() == [
        Endpoint("10.0.0.1", 8000),
        Endpoint("10.0.0.2", 8000),
        Endpoint("10.0.0.2", 8080),
    ]


def test_the_model_list_reads_the_open_models() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.open_models.add(open_model("m", ownedBy="acme", createdAt="2024-01-01T00:00:00Z"))
    assert catalog.model_list() == {
        "object": "list",
        "data": [
            {"id": "m", "object": "model", "created": 1704067200, "owned_by": "acme", "capabilities": VLLM_CAPABILITIES}
        ],
    }


def test_the_catalog_is_synced_once_all_five_informers_are() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.mark_synced()
    cluster.services.mark_synced()
    cluster.open_models.mark_synced()
    cluster.slices.mark_synced()
    assert not catalog.has_synced()
    cluster.core_services.mark_synced()
    assert catalog.has_synced()


async def test_a_held_request_sees_the_endpoint_on_the_slice_event_that_brings_it_and_not_before() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    waiting = asyncio.create_task(catalog.await_endpoints("m", asyncio.get_running_loop().time() + 10 * WAIT))
    await eventually(lambda: len(catalog._waiters) == 1, WAIT, "the request waiting")
    cluster.open_models.add(open_model("m"))
    cluster.core_services.add(lb_service("p"))
    cluster.slices.add(endpoint_slice("p-lb-a", "p-lb", 8080, ("10.0.0.1", False, False)))  # not ready yet
    await eventually(lambda: len(catalog._waiters) == 1, WAIT, "the request waiting again after each event")
    assert not waiting.done()
    cluster.slices.update(endpoint_slice("p-lb-a", "p-lb", 8080, ("10.0.0.1", True, False)))
    assert await asyncio.wait_for(waiting, WAIT) == [Endpoint("10.0.0.1", 8080)]  # long before its deadline
    assert catalog.core_service(NAMESPACE, "p-lb") is not None
    assert [s["metadata"]["name"] for s in catalog.slices_of(NAMESPACE, "p-lb")] == ["p-lb-a"]


async def test_a_held_request_wakes_only_for_events_of_its_own_model(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.playgrounds.add(playground("q", "other"))
    looks: list[str] = []
    endpoints = catalog.endpoints

    def counted(model: str) -> list[Endpoint]:
        looks.append(model)
        return endpoints(model)

    monkeypatch.setattr(catalog, "endpoints", counted)
    waiting = asyncio.create_task(catalog.await_endpoints("m", asyncio.get_running_loop().time() + 10 * WAIT))
    await eventually(lambda: looks == ["m"], WAIT, "the request waiting")
    # Another model's replica comes and goes, its Playground changes: the held request of `m` is not looked at.
    cluster.slices.add(endpoint_slice("q-lb-a", "q-lb", 8080, ("10.0.0.2", True, False)))
    cluster.slices.delete(endpoint_slice("q-lb-a", "q-lb", 8080, ("10.0.0.2", True, False)))
    changed = playground("q", "other")
    changed["metadata"]["labels"] = {"touched": "yes"}
    cluster.playgrounds.update(changed)
    cluster.core_services.add(lb_service("q"))
    await asyncio.sleep(0)  # one turn of the loop: a waiter woken by those events would have looked again
    assert looks == ["m"]
    cluster.slices.add(endpoint_slice("p-lb-a", "p-lb", 8080, ("10.0.0.1", True, False)))
    assert await asyncio.wait_for(waiting, WAIT) == [Endpoint("10.0.0.1", 8080)]
    assert looks == ["m", "m"]


async def test_waiting_for_an_endpoint_ends_empty_at_the_deadline() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    assert await catalog.await_endpoints("m", asyncio.get_running_loop().time() + 0.05) == []


def test_the_slices_of_several_informers_are_read_as_one_cache() -> None:
    cluster = Cluster()
    activator_slices = FakeInformer()
    catalog = Catalog(cluster.playgrounds, cluster.services, cluster.open_models, [cluster.slices, activator_slices])
    cluster.playgrounds.add(playground("p", "m"))
    cluster.slices.add(endpoint_slice("p-lb-a", "p-lb", 8080, ("10.0.0.1", True, False)))
    activator_slices.add(endpoint_slice("p-lb-activator", "p-lb", 8001, ("10.1.0.1", True, None)))
    assert [s["metadata"]["name"] for s in catalog.slices_of(NAMESPACE, "p-lb")] == ["p-lb-a", "p-lb-activator"]
    assert catalog.endpoint_slice(NAMESPACE, "p-lb-activator") is not None
    assert catalog.playgrounds_serving("m") == [playground("p", "m")]


def test_a_speculative_playground_listing_its_draft_first_is_listed_and_routed_under_its_main_model() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    speculative = playground("spec", "unused")
    del speculative["spec"]["modelClaim"]
    speculative["spec"]["modelClaims"] = {"models": [{"name": "small", "role": "draft"}, {"name": "big"}]}
    cluster.playgrounds.add(speculative)
    cluster.slices.add(endpoint_slice("spec-lb-1", "spec-lb", 8080, ("10.0.0.1", True, False)))
    assert catalog.models() == ["big"]
    assert catalog.endpoints("big") == [Endpoint("10.0.0.1", 8080)]
    assert not catalog.serves("small")
    # Its routing annotations are found under the main model too, never under the draft.
    assert catalog.playgrounds_serving("big") == [speculative]
    assert catalog.playgrounds_serving("small") == []

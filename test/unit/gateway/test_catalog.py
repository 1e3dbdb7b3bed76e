"""The catalog: routes follow the informers' contents, endpoints are read per lookup, sync gates readiness."""

from __future__ import annotations

from llmaz.gateway.routing.routes import Endpoint

from .support import NAMESPACE, Cluster, endpoint_slice, inference_service, lb_service, open_model, playground


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


def test_the_model_list_reads_the_open_models() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.open_models.add(open_model("m", ownedBy="acme", createdAt="2024-01-01T00:00:00Z"))
    assert catalog.model_list() == {
        "object": "list",
        "data": [{"id": "m", "object": "model", "created": 1704067200, "owned_by": "acme"}],
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


def test_listeners_hear_playground_slice_and_core_service_events_but_not_openmodel_ones() -> None:
    cluster = Cluster()
    catalog = cluster.catalog()
    heard: list[int] = []
    catalog.add_listener(lambda: heard.append(1))
    cluster.open_models.add(open_model("m"))
    assert heard == []
    cluster.playgrounds.add(playground("p", "m"))
    cluster.slices.add(endpoint_slice("p-lb-a", "p-lb", 8080, ("10.0.0.1", True, False)))
    cluster.core_services.add(lb_service("p"))
    assert len(heard) == 3
    assert catalog.core_service(NAMESPACE, "p-lb") is not None
    assert [s["metadata"]["name"] for s in catalog.slices_of(NAMESPACE, "p-lb")] == ["p-lb-a"]


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

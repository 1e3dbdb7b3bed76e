"""The routing rules, as pure functions of cached objects (see llmaz.gateway.routes)."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.gateway.routing import routes
from llmaz.gateway.routing.routes import Backend, Endpoint

from .support import endpoint_slice, inference_service, open_model, playground


def test_a_playground_and_the_service_it_owns_are_one_backend_and_other_servers_of_a_model_add_theirs() -> None:
    table = routes.route_table(
        [playground("p", "m"), playground("q", "m"), playground("r", "n")],
        [inference_service("p", "m"), inference_service("s", "m", "draft"), inference_service("empty")],
    )
    assert table == {
        "m": (Backend("ns", "p-lb"), Backend("ns", "q-lb"), Backend("ns", "s-lb")),
        "n": (Backend("ns", "r-lb"),),
    }


def test_a_speculative_playground_listing_its_draft_first_is_routed_under_its_main_model() -> None:
    speculative = playground("spec", "unused")
    del speculative["spec"]["modelClaim"]
    speculative["spec"]["modelClaims"] = {
        "models": [{"name": "small", "role": "draft"}, {"name": "big", "role": "main"}]
    }
    assert routes.route_table([speculative], []) == {"big": (Backend("ns", "spec-lb"),)}


def test_only_ready_non_terminating_endpoints_with_an_address_are_routed_to_on_the_http_port() -> None:
    slice_ = endpoint_slice(
        "s",
        "p-lb",
        8080,
        ("10.0.0.1", True, False),
        ("10.0.0.2", False, False),
        ("10.0.0.3", True, True),  # terminating but still serving: drained, not sent new work
        ("10.0.0.4", None, None),  # unknown readiness counts as ready (the EndpointSlice API's rule)
        ("10.0.0.5", False, True),
    )
    slice_["endpoints"].append({"addresses": [], "conditions": {"ready": True}})
    assert routes.ready_endpoints([slice_]) == [Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.4", 8080)]


@pytest.mark.parametrize(
    ("ports", "port"),
    [
        ([{"name": "http", "port": 8080, "protocol": "TCP"}], 8080),
        ([{"name": "metrics", "port": 9090}, {"name": "http", "port": 8000}], 8000),
        ([{"name": "other", "port": 7000}], 7000),
        ([{"name": "a", "port": 1}, {"name": "b", "port": 2}], None),
        ([{"name": "http", "port": 8080, "protocol": "UDP"}], None),
        ([{"name": "http"}], None),
        ([], None),
    ],
)
def test_the_port_is_the_one_named_http_else_the_only_tcp_one(ports: list[dict[str, Any]], port: int | None) -> None:
    slice_ = endpoint_slice("s", "p-lb", 1, ("10.0.0.1", True, False))
    slice_["ports"] = ports
    assert routes.ready_endpoints([slice_]) == ([Endpoint("10.0.0.1", port)] if port else [])


def test_endpoints_of_several_slices_are_merged_once_each() -> None:
    a = endpoint_slice("a", "p-lb", 8080, ("10.0.0.2", True, False), ("10.0.0.1", True, False))
    b = endpoint_slice("b", "p-lb", 8080, ("10.0.0.1", True, False))
    assert routes.ready_endpoints([a, b]) == [Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)]


def test_ipv6_endpoints_get_a_bracketed_url() -> None:
    assert Endpoint("fd00::1", 8080).base_url == "http://[fd00::1]:8080"
    assert Endpoint("10.0.0.1", 8080).base_url == "http://10.0.0.1:8080"


def test_the_connect_url_follows_the_resolve_map_and_keeps_the_port() -> None:
    resolve = {"10.0.0.1": "127.0.0.1", "fd00::1": "::1"}
    assert Endpoint("10.0.0.1", 8080).connect_url(resolve) == "http://127.0.0.1:8080"
    assert Endpoint("fd00::1", 8080).connect_url(resolve) == "http://[::1]:8080"
    assert Endpoint("10.0.0.2", 8080).connect_url(resolve) == "http://10.0.0.2:8080"


def test_the_slice_transform_keeps_what_routing_reads_and_only_the_key_of_other_services_slices() -> None:
    full = endpoint_slice("s", "p-lb", 8080, ("10.0.0.1", True, False))
    full["metadata"] |= {"resourceVersion": "5", "ownerReferences": [{"name": "p-lb"}], "managedFields": [{}]}
    compact = routes.compact_endpoint_slice(full)
    assert compact == {
        "metadata": {"name": "s", "namespace": "ns", "labels": {"kubernetes.io/service-name": "p-lb"}},
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True, "terminating": False}}],
    }
    assert routes.ready_endpoints([compact]) == routes.ready_endpoints([full])
    other = routes.compact_endpoint_slice(endpoint_slice("k", "kubernetes", 443, ("10.0.0.9", True, False)))
    assert other == {
        "metadata": {"name": "k", "namespace": "ns", "labels": {"kubernetes.io/service-name": "kubernetes"}}
    }
    assert routes.slice_backend_key(compact) == ["ns/p-lb"]
    assert routes.slice_backend_key({"metadata": {"name": "x", "namespace": "ns"}}) == []


def test_model_cards_take_owner_and_creation_time_from_the_open_model() -> None:
    models = {
        "a": open_model("a", ownedBy="acme", createdAt="2024-01-01T00:00:00Z"),
        "b": open_model("b"),  # defaults: llmaz, and the object's creationTimestamp
        "c": open_model("c", createdAt="not a time"),
    }
    listed = routes.model_list(["c", "b", "a", "zz", "a"], models.get)
    assert listed == {
        "object": "list",
        "data": [
            {"id": "a", "object": "model", "created": 1704067200, "owned_by": "acme"},
            {"id": "b", "object": "model", "created": 1714521600, "owned_by": "llmaz"},
            {"id": "c", "object": "model", "created": 1714521600, "owned_by": "llmaz"},
            {"id": "zz", "object": "model", "created": 0, "owned_by": "llmaz"},
        ],
    }

"""The `-lb` activator's pure rules: which slice a Playground wants, and what to do about the one that exists."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmaz.apis import constants as c
from llmaz.gateway.routing import routes
from llmaz.gateway.scaling import activation
from llmaz.gateway.scaling.activation import Action

from .support import NAMESPACE, endpoint_slice, lb_service, playground

PORT = 8001
GATEWAY_PODS = (("10.1.0.1", True, False), ("10.1.0.2", True, False))


def asleep(after: str | None = "5m") -> dict[str, Any]:
    found = playground("p", "m")
    found["metadata"]["uid"] = "uid-p"
    if after is not None:
        found["metadata"]["annotations"] = {c.SCALE_TO_ZERO_AFTER_ANNOTATION: after}
    found["spec"]["replicas"] = 0
    return found


def gateway_slice(*pods: tuple[str, bool | None, bool | None], address_type: str = "IPv4") -> dict[str, Any]:
    found = endpoint_slice("llmaz-gateway-abcde", "llmaz-gateway", 8000, *pods, namespace="llmaz-system")
    found["addressType"] = address_type
    return found


def engine(*endpoints: tuple[str, bool | None, bool | None]) -> dict[str, Any]:
    return endpoint_slice("p-lb-xyz12", "p-lb", 8080, *endpoints)


def ours(*addresses: str, port_name: str = "http") -> dict[str, Any]:
    found = endpoint_slice("p-lb-activator", "p-lb", PORT, *((a, True, None) for a in addresses), port_name=port_name)
    found["metadata"]["labels"][routes.MANAGED_BY_LABEL] = routes.ACTIVATOR_MANAGED_BY
    found["metadata"]["uid"] = "uid-slice"
    return found


def wanted(
    pg: dict[str, Any] | None = None,
    service: dict[str, Any] | None = None,
    lb_slices: tuple[dict[str, Any], ...] = (),
    gateway: tuple[dict[str, Any], ...] | None = None,
    port: int = PORT,
) -> activation.Desired:
    return activation.desired_slice(
        pg or asleep(),
        service if service is not None else lb_service("p"),
        lb_slices,
        gateway if gateway is not None else (gateway_slice(*GATEWAY_PODS),),
        port,
    )


def test_a_sleeping_playground_wants_a_slice_of_its_lb_service_listing_the_ready_gateway_pods() -> None:
    desired = wanted().slice
    assert desired == {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "p-lb-activator",
            "namespace": NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": "p-lb",
                "endpointslice.kubernetes.io/managed-by": "llmaz-gateway.llmaz.io",
            },
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Playground",
                    "name": "p",
                    "uid": "uid-p",
                    "controller": False,
                }
            ],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": PORT, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.1.0.1"], "conditions": {"ready": True}, "nodeName": "n"},
            {"addresses": ["10.1.0.2"], "conditions": {"ready": True}, "nodeName": "n"},
        ],
    }


@pytest.mark.parametrize(
    ("case", "kwargs", "reason"),
    [
        ("opted out", {"pg": asleep(after=None)}, "did not opt in"),
        ("invalid annotation", {"pg": asleep(after="soon")}, "not a valid duration"),
        ("too short an idle time", {"pg": asleep(after="1s")}, "not a valid duration"),
        ("has a ready endpoint", {"lb_slices": (engine(("10.0.0.1", True, False)),)}, "has a ready endpoint"),
        ("ready is unknown (absent)", {"lb_slices": (engine(("10.0.0.1", None, None)),)}, "has a ready endpoint"),
        ("activator disabled", {"port": 0}, "disabled"),
        ("no -lb Service yet", {"service": {}}, "does not exist"),
        ("no TCP port", {"service": lb_service("p", ("a", 1), ("b", 2))}, "no TCP port"),
    ],
)
def test_no_slice_is_wanted(case: str, kwargs: dict[str, Any], reason: str) -> None:
    if kwargs.get("service") == {}:
        desired = activation.desired_slice(asleep(), None, (), (gateway_slice(*GATEWAY_PODS),), PORT)
    else:
        desired = wanted(**kwargs)
    assert desired.slice is None, case
    assert reason in desired.reason, (case, desired.reason)


@pytest.mark.parametrize(
    ("case", "lb_slices"),
    [
        ("no endpoint at all", ()),
        ("only not-ready endpoints", (engine(("10.0.0.1", False, False)),)),
        ("only terminating endpoints", (engine(("10.0.0.1", True, True), ("10.0.0.2", None, True)),)),
        ("its own activator slice only", (ours("10.1.0.1"),)),
        ("an endpoint without an address", (engine(),)),
    ],
)
def test_a_slice_is_wanted_while_the_playground_has_no_ready_endpoint_of_its_own(
    case: str, lb_slices: tuple[dict[str, Any], ...]
) -> None:
    desired = wanted(lb_slices=lb_slices).slice
    assert desired is not None, case
    assert activation.addresses(desired) == ["10.1.0.1", "10.1.0.2"], case


def test_awake_replicas_do_not_matter_only_ready_endpoints_do() -> None:
    loading = asleep()
    loading["spec"]["replicas"] = 1  # woken, the engine still loading: direct clients are still held
    assert wanted(pg=loading).slice is not None


def test_without_a_ready_gateway_pod_the_slice_stays_with_no_endpoints() -> None:
    not_ready = gateway_slice(("10.1.0.1", False, False), ("10.1.0.2", True, True))
    for gateway in ((), (not_ready,)):
        desired = wanted(gateway=gateway).slice
        assert desired is not None
        assert desired["endpoints"] == []


def test_the_port_is_named_after_the_services_port() -> None:
    only = wanted(service=lb_service("p", ("serving", 8080))).slice
    unnamed = wanted(service=lb_service("p", ("", 8080))).slice
    several = wanted(service=lb_service("p", ("metrics", 9090), ("http", 8080))).slice
    assert only is not None
    assert unnamed is not None
    assert several is not None
    assert only["ports"] == [{"name": "serving", "port": PORT, "protocol": "TCP"}]
    assert unnamed["ports"] == [{"name": "", "port": PORT, "protocol": "TCP"}]
    assert several["ports"] == [{"name": "http", "port": PORT, "protocol": "TCP"}]


def test_the_address_family_is_the_services_primary_one() -> None:
    v4 = gateway_slice(*GATEWAY_PODS)
    v6 = gateway_slice(("fd00::1", True, False), address_type="IPv6")
    desired = wanted(service=lb_service("p", ip_families=("IPv6", "IPv4")), gateway=(v4, v6)).slice
    assert desired is not None
    assert desired["addressType"] == "IPv6"
    assert activation.addresses(desired) == ["fd00::1"]


def test_the_activators_slices_are_never_routed_to() -> None:
    slices = [ours("10.1.0.1"), engine(("10.0.0.1", True, False))]
    assert routes.ready_endpoints(slices) == [routes.Endpoint("10.0.0.1", 8080)]
    assert routes.ready_endpoints([ours("10.1.0.1")]) == []


def test_the_slice_transform_keeps_what_the_activator_reads() -> None:
    compact = routes.compact_endpoint_slice(ours("10.1.0.1"))
    assert routes.is_activator_slice(compact)
    assert compact["metadata"]["uid"] == "uid-slice"
    gateway = routes.compact_endpoint_slice(gateway_slice(*GATEWAY_PODS), keep={"llmaz-system/llmaz-gateway"})
    assert gateway["addressType"] == "IPv4"
    assert activation.gateway_pods([gateway], "IPv4") == [
        activation.GatewayPod("10.1.0.1", "n"),
        activation.GatewayPod("10.1.0.2", "n"),
    ]
    not_kept = routes.compact_endpoint_slice(gateway_slice(*GATEWAY_PODS))
    assert "endpoints" not in not_kept
    foreign = routes.compact_endpoint_slice(endpoint_slice("p-lb-activator", "p-lb", PORT, ("10.9.9.9", True, None)))
    assert not routes.is_activator_slice(foreign)


def foreign(*addresses: str) -> dict[str, Any]:
    found = ours(*addresses)
    found["metadata"]["labels"][routes.MANAGED_BY_LABEL] = "someone-else"
    return found


@pytest.mark.parametrize(
    ("case", "desired", "existing", "action"),
    [
        ("wanted, missing", True, None, Action.CREATE),
        ("not wanted, missing", False, None, Action.NOTHING),
        ("wanted, ours, same", True, ours("10.1.0.2", "10.1.0.1"), Action.NOTHING),
        ("wanted, ours, other addresses", True, ours("10.1.0.9"), Action.UPDATE),
        ("wanted, ours, other port name", True, ours("10.1.0.1", "10.1.0.2", port_name="x"), Action.UPDATE),
        ("not wanted, ours", False, ours("10.1.0.1"), Action.DELETE),
        (
            "wanted, ours, another address type",
            True,
            ours("10.1.0.1", "10.1.0.2") | {"addressType": "IPv6"},
            Action.DELETE,
        ),
        ("wanted, foreign", True, foreign("10.1.0.9"), Action.FOREIGN),
        ("not wanted, foreign", False, foreign("10.1.0.9"), Action.FOREIGN),
    ],
)
def test_the_plan_never_touches_a_slice_someone_else_manages(
    case: str, desired: bool, existing: dict[str, Any] | None, action: Action
) -> None:
    target = wanted().slice if desired else None
    assert activation.plan(copy.deepcopy(target), existing) is action, case

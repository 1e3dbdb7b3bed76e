"""Pure rules of the `-lb` activator: which EndpointSlice, if any, sends a sleeping Playground's own Service to us.

A client that calls a Playground's core Service `<name>-lb` directly reaches its engine pods through the
EndpointSlices the EndpointSlice controller keeps. While the Playground has no ready engine endpoint, the gateway
adds a slice of its own to that Service (`activator` writes it): the ready gateway pods, on the activator port,
so kube-proxy sends the direct client to a gateway, which wakes the model and forwards the request.

Rules (each a test in test_activation.py):
- A slice is wanted only for a Playground that opted in with a valid `llmaz.io/scale-to-zero-after`, serves a model
  that is routed to it (not one another namespace owns: the gateway would send the held request to that namespace's
  engines, and never wake this Playground), has a uid (the slice is owned by it, so garbage collection removes both
  together), whose `-lb` Service exists with a usable TCP port, and which has no ready endpoint of its own (ready as
  routing counts it: not `ready: false`, not terminating; slices labelled as the activator's never count) - and only
  when the activator is enabled (a port other than 0).
- The slice is named `<name>-lb-activator`, labelled `kubernetes.io/service-name: <name>-lb` (kube-proxy uses it
  for that Service) and `endpointslice.kubernetes.io/managed-by: llmaz-gateway.llmaz.io` (the EndpointSlice
  controller leaves it alone). Its one port has the name of the Service's port (the only TCP one, else the one
  named `http`: kube-proxy matches slice ports to Service ports by name) and the activator's number, TCP.
- Its endpoints are the ready pods of the gateway's own Service, of the `-lb` Service's primary IP family, each
  `ready: true`, with its node name when known. No ready gateway pod gives a slice with no endpoints rather
  than no slice: the slice's existence follows the Playground's sleep, not the gateway's rollouts, so its
  Events mark real transitions (and for kube-proxy an empty slice and no slice are the same).
- A slice of that name that is not labelled as the activator's belongs to someone else: it is never updated or
  deleted (`plan` says FOREIGN). One of ours of another address type (the Service's family changed) is deleted,
  to be created anew: the address type of a slice is immutable.

Nothing here does I/O; inputs are cached (compacted, see `routes.compact_endpoint_slice`) objects.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.scaletozero import idle_after
from llmaz.apis.serving import lb_service_name, main_model
from llmaz.gateway.routing import routes

Obj = dict[str, Any]

SLICE_SUFFIX = "-activator"
DEFAULT_ADDRESS_TYPE = "IPv4"
_ADDRESS_TYPES = ("IPv4", "IPv6")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def slice_name(playground_name: str) -> str:
    """`<name>-lb-activator`: beside the EndpointSlice controller's `<name>-lb-xxxxx`, never one of them."""
    return lb_service_name(playground_name) + SLICE_SUFFIX


@dataclass(frozen=True, slots=True, order=True)
class GatewayPod:
    address: str
    node_name: str | None = None


def address_type(lb_service: Obj) -> str:
    """The Service's primary IP family as an EndpointSlice address type (kube-proxy reads slices of that type)."""
    families = _mapping(lb_service.get("spec")).get("ipFamilies")
    if isinstance(families, list) and families and families[0] in _ADDRESS_TYPES:
        return str(families[0])
    return DEFAULT_ADDRESS_TYPE


def port_name(lb_service: Obj) -> str | None:
    """The name of the Service's port the slice serves: its only TCP port, else its TCP port named `http`."""
    ports = [
        p for p in _mapping(lb_service.get("spec")).get("ports") or [] if _mapping(p).get("protocol", "TCP") == "TCP"
    ]
    named = [p for p in ports if p.get("name") == c.HTTP_PORT_NAME]
    chosen = ports if len(ports) == 1 else named
    return str(chosen[0].get("name") or "") if chosen else None


def gateway_pods(gateway_slices: Iterable[Obj], family: str) -> list[GatewayPod]:
    """The ready endpoints of the gateway Service's slices of address type `family`, each address once, sorted."""
    found: dict[str, GatewayPod] = {}
    for slice_ in gateway_slices:
        if slice_.get("addressType", DEFAULT_ADDRESS_TYPE) != family:
            continue
        for endpoint in slice_.get("endpoints") or []:
            addresses = [a for a in _mapping(endpoint).get("addresses") or [] if isinstance(a, str) and a]
            if addresses and routes.is_ready(endpoint):
                node = endpoint.get("nodeName")
                found.setdefault(addresses[0], GatewayPod(addresses[0], node if isinstance(node, str) else None))
    return sorted(found.values())


def has_own_ready_endpoint(lb_slices: Iterable[Obj]) -> bool:
    """Whether any slice of the `-lb` Service but the activator's has a ready endpoint with an address."""
    for slice_ in lb_slices:
        if routes.is_activator_slice(slice_):
            continue
        for endpoint in slice_.get("endpoints") or []:
            if _mapping(endpoint).get("addresses") and routes.is_ready(endpoint):
                return True
    return False


@dataclass(frozen=True, slots=True)
class Desired:
    """The slice wanted for one Playground (None for none) and why, in words for logs and Events."""

    slice: Obj | None
    reason: str


def desired_slice(
    playground: Obj,
    lb_service: Obj | None,
    lb_slices: Iterable[Obj],
    gateway_slices: Iterable[Obj],
    port: int,
    routed: bool = True,
) -> Desired:
    """The activator slice for `playground` (see the module rules); `port` 0 means the activator is disabled;
    `routed` False: its model's requests do not go to it (another namespace owns the model name, see
    `Catalog.routed`)."""
    meta = _mapping(playground.get("metadata"))
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if port == 0:
        return Desired(None, "the activator is disabled")
    try:
        if idle_after(playground) is None:
            return Desired(None, f"the Playground did not opt in to {c.SCALE_TO_ZERO_AFTER_ANNOTATION}")
    except ValueError:
        return Desired(None, f"the Playground's {c.SCALE_TO_ZERO_AFTER_ANNOTATION} is not a valid duration")
    if not isinstance(name, str) or not isinstance(namespace, str) or not uid or main_model(playground) is None:
        return Desired(None, "the Playground has no name, uid or model")
    if not routed:
        return Desired(None, "its model is served from another namespace: its requests never come here")
    if lb_service is None:
        return Desired(None, f"the Service {lb_service_name(name)} does not exist")
    service_port = port_name(lb_service)
    if service_port is None:
        return Desired(None, f"the Service {lb_service_name(name)} has no TCP port to serve")
    if has_own_ready_endpoint(lb_slices):
        return Desired(None, "the Playground has a ready endpoint")
    family = address_type(lb_service)
    pods = gateway_pods(gateway_slices, family)
    body: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(name),
            "namespace": namespace,
            "labels": {
                routes.SERVICE_NAME_LABEL: lb_service_name(name),
                routes.MANAGED_BY_LABEL: routes.ACTIVATOR_MANAGED_BY,
            },
            "ownerReferences": [
                {
                    "apiVersion": str(playground.get("apiVersion") or "inference.llmaz.io/v1alpha1"),
                    "kind": "Playground",
                    "name": name,
                    "uid": uid,
                    "controller": False,
                }
            ],
        },
        "addressType": family,
        "ports": [{"name": service_port, "port": port, "protocol": "TCP"}],
        "endpoints": [_endpoint(pod) for pod in pods],
    }
    return Desired(body, "the Playground has no ready endpoint")


def _endpoint(pod: GatewayPod) -> Obj:
    endpoint: Obj = {"addresses": [pod.address], "conditions": {"ready": True}}
    if pod.node_name:
        endpoint["nodeName"] = pod.node_name
    return endpoint


class Action(enum.Enum):
    NOTHING = "nothing"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    FOREIGN = "foreign"
    """A slice of that name is someone else's: left alone, whatever is wanted."""


def addresses(slice_: Obj) -> list[str]:
    """The first address of each endpoint of a slice, sorted (what the activator compares and reports)."""
    found = [str(ep["addresses"][0]) for ep in slice_.get("endpoints") or [] if _mapping(ep).get("addresses")]
    return sorted(found)


def _ports(slice_: Obj) -> list[tuple[str, int, str]]:
    return sorted(
        (str(p.get("name") or ""), int(p.get("port") or 0), str(p.get("protocol") or "TCP"))
        for p in slice_.get("ports") or []
        if isinstance(p, Mapping)
    )


def same_content(existing: Obj, desired: Obj) -> bool:
    """Whether a (cached or live) slice already has the desired ports and endpoint addresses."""
    return _ports(existing) == _ports(desired) and addresses(existing) == addresses(desired)


def plan(desired: Obj | None, existing: Obj | None) -> Action:
    """What to do about the slice of the activator's name, given what is wanted and what is (cached)."""
    if existing is None:
        return Action.NOTHING if desired is None else Action.CREATE
    if not routes.is_activator_slice(existing):
        return Action.FOREIGN
    if desired is None or existing.get("addressType", desired["addressType"]) != desired["addressType"]:
        return Action.DELETE  # an address type is immutable: a slice of the wrong one is replaced
    return Action.NOTHING if same_content(existing, desired) else Action.UPDATE

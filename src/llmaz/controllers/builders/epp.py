"""The endpoint picker's Service in a namespace holding llmaz InferencePools, and the EndpointSlice that mirrors
llmaz-gateway's picker into it.

An InferencePool names its endpoint picker by a Service in the pool's own namespace, but the picker runs in
llmaz-gateway's pods (`--epp-port`, behind the Service `llmaz-gateway-epp` in the gateway's namespace). So every
namespace with a Playground asking for a pool gets a Service `llmaz-epp` without selector (port 9002 `grpc`,
appProtocol `kubernetes.io/h2c`) and one EndpointSlice `llmaz-epp` listing the ready endpoints of
`llmaz-gateway-epp`'s slices, on their `grpc` port. A gateway resolving `llmaz-epp` thus reaches the gateway pods
directly, across namespaces, with no proxy in between.

Both carry llmaz's managed-by label; the slice also names its manager (`endpointslice.kubernetes.io/managed-by:
epp-mirror.llmaz.io`) so the EndpointSlice controller, which manages only its own slices, leaves it alone. A
source endpoint is ready as the gateway reads readiness (`routing.routes`): an address, `ready` not false and
`terminating` not true.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from llmaz.apis import constants as c
from llmaz.controllers.builders.meta import apply_ready

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL: Final = "endpointslice.kubernetes.io/managed-by"
EPP_MIRROR_MANAGED_BY: Final = "epp-mirror.llmaz.io"
EPP_PORT_NAME: Final = "grpc"
H2C: Final = "kubernetes.io/h2c"


def build_epp_service(namespace: str) -> dict[str, Any]:
    """The selector-less Service `llmaz-epp` of `namespace`, whose endpoints the mirrored slice supplies."""
    port = {"name": EPP_PORT_NAME, "protocol": "TCP", "appProtocol": H2C, "port": c.EPP_PORT, "targetPort": c.EPP_PORT}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": c.EPP_SERVICE_NAME,
            "namespace": namespace,
            "labels": {c.MANAGED_BY_LABEL: c.MANAGED_BY},
        },
        "spec": {"type": "ClusterIP", "ports": [port]},
    }
    result: dict[str, Any] = apply_ready(service)
    return result


def _ready(endpoint: dict[str, Any]) -> bool:
    conditions = endpoint.get("conditions") or {}
    return (
        bool(endpoint.get("addresses")) and conditions.get("ready") is not False and not conditions.get("terminating")
    )


def _grpc_port(source: dict[str, Any]) -> int | None:
    ports = [p for p in source.get("ports") or [] if (p.get("protocol") or "TCP") == "TCP" and p.get("port")]
    named = [p for p in ports if p.get("name") == EPP_PORT_NAME]
    return int(named[0]["port"]) if named else None


def build_epp_slice(namespace: str, sources: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The EndpointSlice `llmaz-epp` of `namespace`: the ready IPv4 endpoints of the gateway's picker slices
    `sources`, on their `grpc` port (all on one port: the picker's; the first slice naming one decides), sorted by
    address so the same endpoints always make the same object."""
    port: int | None = None
    addresses: set[str] = set()
    for source in sources:
        if source.get("addressType", "IPv4") != "IPv4":
            continue
        found = _grpc_port(source)
        if found is None or (port is not None and found != port):
            continue
        port = found
        for endpoint in source.get("endpoints") or []:
            if _ready(endpoint):
                addresses.update(endpoint["addresses"][:1])
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": c.EPP_SERVICE_NAME,
            "namespace": namespace,
            "labels": {
                c.MANAGED_BY_LABEL: c.MANAGED_BY,
                SERVICE_NAME_LABEL: c.EPP_SERVICE_NAME,
                SLICE_MANAGED_BY_LABEL: EPP_MIRROR_MANAGED_BY,
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": EPP_PORT_NAME, "protocol": "TCP", "appProtocol": H2C, "port": port or c.EPP_PORT}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}} for address in sorted(addresses)],
    }
    result: dict[str, Any] = apply_ready(slice_)
    return result

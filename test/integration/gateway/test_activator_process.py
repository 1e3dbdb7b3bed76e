"""The `-lb` activator as a process, with nothing but the generated gateway role: for a sleeping opted-in Playground
it creates an EndpointSlice of the `-lb` Service naming the ready gateway pods, follows the gateway's pods, and
deletes it once the Playground has a ready endpoint of its own, each transition one Event.

No controller runs: the test writes what they would (the `-lb` Service, the EndpointSlice controller's slices of
it and of the gateway's own Service). The API server refuses loopback IPs in EndpointSlices, so the gateway pods
are documentation addresses (TEST-NET-1); nothing connects to them here.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.gateway_objects import endpoint_slice
from llmaz_dev.testing.waiting import eventually

from .conftest import GATEWAY_SERVICE, GatewayProcess

WAIT = 30.0
OLD_POD, NEW_POD, ENGINE_POD = "192.0.2.21", "192.0.2.22", "192.0.2.30"


def _lb_service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "pg-lb", "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "llmaz"}},
        "spec": {
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080}],
            "selector": {"leaderworkerset.sigs.k8s.io/name": "pg", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
        },
    }


def _events(admin: Any, namespace: str, reason: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = admin.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in found if e.get("reason") == reason and e["regarding"]["name"] == "pg"]


async def test_the_activator_slice_is_created_follows_the_gateway_pods_and_is_deleted_once_the_model_is_ready(
    control_plane: Cluster, namespace: str, gateway: GatewayProcess
) -> None:
    admin = control_plane.admin_client()
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    gateway_slice = endpoint_slice(
        "llmaz-gateway-abcde", GATEWAY_SERVICE, 8080, (OLD_POD, True, False), namespace=namespace
    )
    admin.request("POST", slices, gateway_slice)
    admin.request("POST", f"/api/v1/namespaces/{namespace}/services", _lb_service(namespace))
    playground = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "pg", "namespace": namespace, "annotations": {"llmaz.io/scale-to-zero-after": "10m"}},
        "spec": {"modelClaim": {"modelName": f"gw-{namespace}"}, "replicas": 0},
    }
    created = admin.request("POST", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds", playground)

    def activator_slice() -> dict[str, Any] | None:
        return next(
            (s for s in admin.request("GET", slices)["items"] if s["metadata"]["name"] == "pg-lb-activator"), None
        )

    def addresses() -> list[str] | None:
        found = activator_slice()
        return None if found is None else sorted(e["addresses"][0] for e in found.get("endpoints") or [])

    await eventually(lambda: addresses() == [OLD_POD], within=WAIT, what="the activator slice naming the gateway pod")
    made = activator_slice()
    assert made is not None
    assert made["metadata"]["labels"] == {
        "kubernetes.io/service-name": "pg-lb",
        "endpointslice.kubernetes.io/managed-by": "llmaz-gateway.llmaz.io",
    }
    assert made["ports"] == [{"name": "http", "port": gateway.activator_port, "protocol": "TCP"}]
    (owner,) = made["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Playground", "pg", created["metadata"]["uid"])
    assert made["endpoints"][0]["conditions"]["ready"] is True

    # A rollout of the gateway: a new pod is ready, the old one terminates.
    current = admin.request("GET", f"{slices}/llmaz-gateway-abcde")
    rolled = endpoint_slice(
        "llmaz-gateway-abcde",
        GATEWAY_SERVICE,
        8080,
        (NEW_POD, True, False),
        (OLD_POD, False, True),
        namespace=namespace,
    )
    rolled["metadata"] = current["metadata"]
    admin.request("PUT", f"{slices}/llmaz-gateway-abcde", rolled)
    await eventually(lambda: addresses() == [NEW_POD], within=WAIT, what="the activator slice following the rollout")

    # The engine's pod is ready: the Playground has an endpoint of its own.
    admin.request(
        "POST", slices, endpoint_slice("pg-lb-xyz12", "pg-lb", 8080, (ENGINE_POD, True, False), namespace=namespace)
    )
    await eventually(lambda: activator_slice() is None, within=WAIT, what="the activator slice deleted")

    def both_events() -> bool:
        return bool(_events(admin, namespace, "ActivatorEnabled") and _events(admin, namespace, "ActivatorRemoved"))

    await eventually(both_events, within=WAIT, what="the activator's Events")
    (enabled,) = _events(admin, namespace, "ActivatorEnabled")
    (removed,) = _events(admin, namespace, "ActivatorRemoved")
    assert enabled["note"].startswith("Created EndpointSlice pg-lb-activator with 1 llmaz-gateway address(es)")
    assert removed["note"] == "Deleted EndpointSlice pg-lb-activator: the Playground has a ready endpoint"
    assert gateway.process.exit_code() is None
    assert "Forbidden" not in gateway.process.log_path.read_text()

    # The activator listener serves the same API.
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
        session.get(f"http://127.0.0.1:{gateway.activator_port}/v1/models") as resp,
    ):
        assert resp.status == 200
        assert f"gw-{namespace}" in [m["id"] for m in (await resp.json())["data"]]

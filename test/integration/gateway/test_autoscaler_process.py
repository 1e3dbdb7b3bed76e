"""The gateway process's autoscaler on a real API server, with the generated RBAC only: it takes its Lease in the
gateway's namespace and scales a `requests`-triggered Playground through the scale subresource, with an Event.

No engine exports load here, so the load is not known and the count is held within the Playground's bounds: a
Playground stored above its maxReplicas is brought down to it (the decisions on known load are unit-tested)."""

from __future__ import annotations

from typing import Any

from llmaz.gateway.scaling.autoscaler import LEASE_NAME
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .conftest import GatewayProcess

WAIT = 30.0


async def test_the_lease_holder_keeps_an_autoscaled_playground_within_its_bounds(
    control_plane: Cluster, namespace: str, gateway: GatewayProcess
) -> None:
    admin = control_plane.admin_client()
    path = f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds"
    requests = {"targetPerReplica": 4}
    playground: dict[str, Any] = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "pg", "namespace": namespace},
        "spec": {
            "replicas": 5,
            "modelClaim": {"modelName": f"gw-{namespace}"},
            "elasticConfig": {"minReplicas": 1, "maxReplicas": 3, "scaleTrigger": {"requests": requests}},
        },
    }
    admin.request("POST", path, playground)

    def lease_holder() -> str | None:
        leases = admin.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")["items"]
        holders = [lease["spec"].get("holderIdentity") for lease in leases if lease["metadata"]["name"] == LEASE_NAME]
        return holders[0] if holders and isinstance(holders[0], str) else None

    await eventually(lease_holder, within=WAIT, what="the autoscaler's Lease held")

    def scaled_down() -> bool:
        return int(admin.request("GET", f"{path}/pg")["spec"]["replicas"]) == 3

    await eventually(scaled_down, within=WAIT, what="the Playground brought down to maxReplicas")
    events = admin.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    notes = [e["note"] for e in events if e.get("reason") == "ScaledDown" and e["regarding"]["name"] == "pg"]
    assert notes == ["Scaled from 5 to 3 replicas: load not known, kept within minReplicas 1 and maxReplicas 3"]

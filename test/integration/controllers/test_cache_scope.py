"""The manager caches only the core Services, HPAs and LeaderWorkerSets llmaz made, and still finds older ones.

Children from before the `app.kubernetes.io/managed-by` label are relabelled in place by the next apply (same
uid); an unlabelled HPA of a Playground that no longer wants one is labelled once at start, then removed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmaz.apis import resources as r
from llmaz.controllers.setup import ControllerSettings
from llmaz.runtime.client import Client, PatchType
from llmaz.runtime.manager import Manager
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground
from .running import manager_running

pytestmark = pytest.mark.integration

LABEL = "app.kubernetes.io/managed-by"
ELASTIC = {
    "minReplicas": 1,
    "maxReplicas": 2,
    "scaleTrigger": {
        "hpa": {
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ]
        }
    },
}


def unrelated(namespace: str) -> list[tuple[Any, dict[str, Any]]]:
    """A headless Service, an HPA and a LeaderWorkerSet of someone else's, without llmaz's label."""
    meta = {"name": "other", "namespace": namespace, "labels": {"app": "other"}}
    service_spec = {"clusterIP": "None", "selector": {"app": "other"}, "ports": [{"port": 80}]}
    hpa_spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"}, "maxReplicas": 2}
    lws_spec = {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    return [
        (r.SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": service_spec}),
        (
            r.HORIZONTAL_POD_AUTOSCALERS,
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": hpa_spec},
        ),
        (
            r.LEADER_WORKER_SETS,
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": meta,
                "spec": lws_spec,
            },
        ),
    ]


def cached(manager: Manager, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return manager.informers.informer_for(resource).store.get(f"{namespace}/{name}")


def in_cache(manager: Manager, resource: Any, namespace: str, name: str) -> Callable[[], dict[str, Any] | None]:
    return lambda: cached(manager, resource, namespace, name)


async def unlabel(client: Client, resource: Any, namespace: str, name: str) -> str:
    """Remove llmaz's label, as a child made before it existed; return the object's uid."""
    patch = [{"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1managed-by"}]
    obj = await client.patch(resource, name, patch, namespace, patch_type=PatchType.JSON)
    assert LABEL not in (obj["metadata"].get("labels") or {})
    return str(obj["metadata"]["uid"])


async def test_only_llmaz_children_are_cached_stripped_and_unlabelled_ones_are_relabelled_in_place(
    manager: Manager, client: Client, namespace: str
) -> None:
    for resource, obj in unrelated(namespace):
        await client.create(resource, obj)
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model, elasticConfig=ELASTIC))
    children = [(r.LEADER_WORKER_SETS, "pg"), (r.SERVICES, "pg-lb"), (r.HORIZONTAL_POD_AUTOSCALERS, "pg")]
    for resource, name in children:
        await eventually(in_cache(manager, resource, namespace, name), what=f"{resource} {name} cached")

    for resource, name in children:
        uid = await unlabel(client, resource, namespace, name)

        async def relabelled(res: Any = resource, n: str = name, u: str = uid) -> bool:
            live = await get_or_none(client, res, n, namespace)
            return (
                live is not None and live["metadata"]["uid"] == u and live["metadata"]["labels"].get(LABEL) == "llmaz"
            )

        await eventually(relabelled, what=f"{resource} {name} relabelled in place")


async def test_an_unlabelled_hpa_of_a_playground_that_wants_none_is_removed_after_a_restart(
    control_plane: Cluster, client: Client, namespace: str, llmaz_defaults: None
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    pg = await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    owner = {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground", "name": "pg",
             "uid": pg["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    leftover = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "pg", "namespace": namespace, "ownerReferences": [owner]},
        "spec": {"scaleTargetRef": {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground", "name": "pg"},
                 "maxReplicas": 2},
    }  # fmt: skip
    await client.create(r.HORIZONTAL_POD_AUTOSCALERS, leftover)  # as llmaz left it when elasticConfig went
    async with manager_running(control_plane.kubeconfig, ControllerSettings()):

        async def gone() -> bool:
            return await get_or_none(client, r.HORIZONTAL_POD_AUTOSCALERS, "pg", namespace) is None

        await eventually(gone, what="the leftover HPA removed")

"""The scheduler extender as kube-scheduler calls it: a real kube-scheduler (a profile with the extender, weight 5:
its preference outweighs the default scores, equal on these identical nodes, and `nodeCacheCapable: true`: it
sends node names) binds model pods to the nodes of their first fitting flavor, over the extender's HTTP API, with
the node labels from a Node informer configured as the manager's.

The nodes exist only as API objects (no kubelet): they are schedulable, and binding is all that is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmaz.apis import resources as r
from llmaz.controllers.caches import configure_caches
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import Client
from llmaz.runtime.metrics import REGISTRY
from llmaz.schedext.server import SchedulerExtender
from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest.scheduler import kube_scheduler_with_extender
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.runnables import running
from llmaz_dev.testing.waiting import eventually

GPU = "nvidia.com/gpu.product"
FLAVORS = [{"name": "a100", "nodeSelector": {GPU: "A100"}}, {"name": "a10", "nodeSelector": {GPU: "A10"}}]


def _node(name: str, product: str | None) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {GPU: product} if product else {}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def nodes(control_plane: Cluster, namespace: str) -> Iterator[dict[str, str]]:
    """Three nodes for this test: an A100 one, an A10 one, and one without a GPU."""
    suffix = namespace.rsplit("-", 1)[-1]
    names = {"a100": f"schedext-{suffix}-a100", "a10": f"schedext-{suffix}-a10", "cpu": f"schedext-{suffix}-cpu"}
    client = control_plane.admin_client()
    for flavor, name in names.items():
        client.request("POST", "/api/v1/nodes", _node(name, {"a100": "A100", "a10": "A10"}.get(flavor)))
    yield names
    for name in names.values():
        client.request("DELETE", f"/api/v1/nodes/{name}")


class _Informers:
    """A SharedInformerFactory as a server Runnable: started once its informers have synced."""

    needs_leader_election = False

    def __init__(self, factory: SharedInformerFactory) -> None:
        self.factory = factory

    async def run(self) -> None:
        await self.factory.run()

    async def wait_started(self) -> None:
        await self.factory.wait_for_sync(30)


@contextlib.asynccontextmanager
async def extender(kubeconfig: Path, model: str) -> AsyncIterator[int]:
    models = FakeInformer()
    models.add({"metadata": {"name": model}, "spec": {"inferenceConfig": {"flavors": FLAVORS}}})
    models.mark_synced()
    client = await Client.from_kubeconfig(kubeconfig)
    factory = SharedInformerFactory(client)
    configure_caches(factory)
    nodes = factory.informer_for(r.NODES)
    try:
        async with (
            running(_Informers(factory), within=30),
            running(SchedulerExtender("127.0.0.1:0", models.store, nodes.store, factory.has_synced)) as server,
        ):
            assert server.port is not None
            yield server.port
    finally:
        await client.close()


def _calls(verb: str) -> float:
    return REGISTRY.get_sample_value("llmaz_scheduler_extender_requests_total", {"verb": verb, "result": "ok"}) or 0.0


def _pod(name: str, scheduler: str, model: str, claimed: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"llmaz.io/model-name": model}}
    if claimed:
        metadata["annotations"] = {"llmaz.io/inference-service-flavors": claimed}
    container = {"name": "c", "image": "registry.example/engine:v1"}
    # The API server taints new nodes not-ready until a kubelet reports; there is none here.
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    spec = {"schedulerName": scheduler, "containers": [container], "tolerations": [not_ready]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def test_kube_scheduler_binds_model_pods_to_their_first_fitting_flavor(
    control_plane: Cluster, kubeconfig: Path, namespace: str, nodes: dict[str, str], tmp_path: Path
) -> None:
    model, scheduler = f"m-{namespace.rsplit('-', 1)[-1]}", f"llmaz-{namespace.rsplit('-', 1)[-1]}"
    calls = {verb: _calls(verb) for verb in ("filter", "prioritize")}
    client = control_plane.admin_client()
    # Pods need their ServiceAccount (admission); no controller creates `default` here.
    client.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "default"}})
    async with extender(kubeconfig, model) as port:
        with kube_scheduler_with_extender(control_plane, scheduler, f"http://127.0.0.1:{port}", tmp_path):
            client.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod("best", scheduler, model))
            client.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod("claimed", scheduler, model, "a10"))

            def bound(name: str) -> str:
                pod = client.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
                node: str = pod["spec"].get("nodeName") or ""
                assert node, [c.get("message") for c in (pod.get("status") or {}).get("conditions") or []]
                return node

            # Polled without blocking the event loop: the extender answers kube-scheduler from it.
            assert await eventually(lambda: asyncio.to_thread(bound, "best"), 60, "pod best bound") == nodes["a100"]
            assert (
                await eventually(lambda: asyncio.to_thread(bound, "claimed"), 60, "pod claimed bound") == nodes["a10"]
            )
    # Both pods were filtered; only `best`, with two feasible nodes, needed scoring.
    assert _calls("filter") >= calls["filter"] + 2
    assert _calls("prioritize") >= calls["prioritize"] + 1

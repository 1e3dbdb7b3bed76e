"""The Service reconciler moves to the next flavor when its pods wait a full fallback period for a node, records
it (status, Warning Event), and says so when no flavor is left; level-triggered: it requeues for the remaining time.

The reconciler runs once per call, on fake caches and a fake clock, with a client that records writes.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from llmaz.apis import resources as r
from llmaz.controllers import indexes as ix
from llmaz.controllers.flavors.capacity import BOUND_POD_SELECTOR, NodeCapacity
from llmaz.controllers.service import CAPACITY_SYNC_RECHECK, ServiceReconciler
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.resource import Resource
from llmaz_dev.testing import FakeInformer

from .test_children_and_admission import INFERENCE, RUNNER, Harness, RecordingClient, _meta, _progressing

INSUFFICIENT = (
    "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
)
FLAVORS = [
    {"name": "a100", "limits": {"nvidia.com/gpu": 8}, "nodeSelector": {"gpu": "a100"}},
    {"name": "a10", "limits": {"nvidia.com/gpu": 2}, "nodeSelector": {"gpu": "a10"}},
]
CONFIG = "init-container-image: loader:v1\nflavor-fallback-after: 30s\n"


class KeepingClient(RecordingClient):
    """Also keeps what was applied."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: list[dict[str, Any]] = []

    async def apply(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.objects.append(obj)
        return await super().apply(resource, obj, **opts)


class FlavorHarness(Harness):
    def __init__(self, claimed: list[str] | None = None) -> None:
        super().__init__()
        self.keeping = KeepingClient()
        self.client = self.keeping
        models = self.source.informer_for(r.OPEN_MODELS)
        model = copy.deepcopy(models.store.get("m"))
        assert model is not None
        # A new resourceVersion: parsed models are cached by it.
        model["metadata"].update(uid="flavored-m-uid", resourceVersion="2")
        model["spec"]["inferenceConfig"] = {"flavors": FLAVORS}
        models.update(model)
        claims: dict[str, Any] = {"models": [{"name": "m"}]}
        if claimed:
            claims["inferenceFlavors"] = claimed
        worker = {"spec": {"schedulerName": "default-scheduler", "containers": [RUNNER]}}
        self.service = {
            "apiVersion": INFERENCE,
            "kind": "Service",
            "metadata": _meta("svc", "svc-uid"),
            "spec": {"modelClaims": claims, "workloadTemplate": {"workerTemplate": worker}},
        }
        self.add(r.INFERENCE_SERVICES, self.service)

    def reconciler(self, config: str = CONFIG) -> ServiceReconciler:
        settings = SettingsHolder()
        settings.update({"data": {"config.data": config}})
        return ServiceReconciler(
            self.client, self.source, self.events, self.clock, settings, capacity=NodeCapacity(self.source)
        )

    def pending_pod(self, name: str, seconds_ago: float, message: str = INSUFFICIENT) -> None:
        since = self.clock.wall() - timedelta(seconds=seconds_ago)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        labels = {"llmaz.io/model-name": "m", "leaderworkerset.sigs.k8s.io/name": "svc"}
        pod = {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "status": {"conditions": [condition]}}
        self.source.informer_for(r.PODS, label_selector=ix.MODEL_POD_SELECTOR).add(pod)

    def gpus(self) -> str:
        lws = [o for o in self.keeping.objects if o["kind"] == "LeaderWorkerSet"][-1]
        runner = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        limit: str = runner["resources"]["limits"]["nvidia.com/gpu"]
        return limit

    def status(self) -> dict[str, Any]:
        return self.client.statuses[-1]

    def caught_up(self) -> None:
        self.written_back(r.INFERENCE_SERVICES, self.service)


async def test_pods_waiting_a_full_period_move_the_service_to_the_next_flavor_once() -> None:
    h = FlavorHarness()
    reconciler = h.reconciler()
    assert await reconciler.reconcile(Request("ns", "svc")) == Result()
    assert (h.gpus(), h.status()["activeFlavor"]) == ("8", "a100")
    h.caught_up()

    # Pending for 10 s of 30: stay, and come back when the period is over.
    h.clock.step(15)
    h.pending_pod("svc-0", 10)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=20.0)
    assert h.gpus() == "8"
    assert "Unschedulable: pod svc-0: 0/4 nodes" in _progressing(h.status())[2]

    h.clock.step(20)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=30.0)
    assert (h.gpus(), h.status()["activeFlavor"], h.status()["activeFlavorTime"]) == (
        "2",
        "a10",
        "2024-01-01T00:00:35Z",
    )
    assert (
        "Warning",
        "FlavorFallback",
        f"Moved from flavor a100 to a10: pod svc-0 was unschedulable for 30s: {INSUFFICIENT}",
    ) in h.events.events
    h.caught_up()

    # The same pod, still pending right after the change: its wait counts from the change, no thrashing.
    h.clock.step(1)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=29.0)
    assert h.gpus() == "2"

    # On the last flavor a full period later: it stays, and says no flavor fits.
    h.clock.step(29)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result()
    assert h.gpus() == "2"
    assert _progressing(h.status()) == (
        "True",
        "ServiceInProgress",
        "Inference Service is progressing: Unschedulable: pod svc-0: no inference flavor fits (tried a100, a10): "
        + INSUFFICIENT,
    )
    assert len([e for e in h.events.events if e[1] == "FlavorFallback"]) == 1


async def test_a_pod_waiting_for_a_volume_does_not_move_the_service() -> None:
    h = FlavorHarness()
    h.pending_pod("svc-0", 600, "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims.")
    assert await h.reconciler().reconcile(Request("ns", "svc")) == Result()
    assert (h.gpus(), h.status()["activeFlavor"]) == ("8", "a100")
    assert "PersistentVolumeClaims" in _progressing(h.status())[2]
    assert not [e for e in h.events.events if e[1] == "FlavorFallback"]


async def test_a_claimed_flavor_the_model_lacks_is_skipped_and_reported() -> None:
    h = FlavorHarness(claimed=["h100", "a10"])
    assert await h.reconciler().reconcile(Request("ns", "svc")) == Result()
    assert (h.gpus(), h.status()["activeFlavor"]) == ("2", "a10")
    resolved = next(c for c in h.status()["conditions"] if c["type"] == "FlavorsResolved")
    assert (resolved["status"], resolved["message"]) == (
        "False",
        "OpenModel m defines no inference flavor h100; using a10",
    )


def gpu_node(name: str, gpu: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"gpu": gpu}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def bound_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running"},
    }


def capacity_requested(h: FlavorHarness) -> bool:
    nodes = r.NODES in h.source.informers
    pods = (r.PODS, None, None, BOUND_POD_SELECTOR) in h.source.scoped
    assert nodes == pods
    return nodes


def fill_capacity(h: FlavorHarness, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> FakeInformer:
    """The node and bound-pod informers' first list, as the API server would answer it."""
    for node in nodes:
        h.source.informer_for(r.NODES).add(node)
    bound = h.source.informer_for(r.PODS, field_selector=BOUND_POD_SELECTOR)
    for pod in pods:
        bound.add(pod)
    h.source.mark_all_synced()
    return bound


async def _moved_to_a10(h: FlavorHarness, reconciler: ServiceReconciler) -> None:
    """On a100, a pod waits a full period: the Service moves to a10, and the pod goes (rescheduled on an a10 node)."""
    await reconciler.reconcile(Request("ns", "svc"))
    h.caught_up()
    h.clock.step(30)
    h.pending_pod("svc-0", 30)
    await reconciler.reconcile(Request("ns", "svc"))
    assert (h.gpus(), h.status()["activeFlavor"]) == ("2", "a10")
    h.caught_up()
    h.source.informer_for(r.PODS, label_selector=ix.MODEL_POD_SELECTOR).delete(
        {"metadata": {"name": "svc-0", "namespace": "ns"}}
    )


async def test_with_return_on_the_service_moves_back_once_the_first_flavor_has_room() -> None:
    h = FlavorHarness()
    reconciler = h.reconciler(CONFIG + "flavor-return-when-fits: true\n")
    await _moved_to_a10(h, reconciler)

    # Within the period after the change nothing is read: it looks again when the period is over.
    h.clock.step(10)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=20.0)
    assert not capacity_requested(h)

    # A full period on, the first check asks for the nodes and bound pods; it looks again once they are cached.
    h.clock.step(20)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=CAPACITY_SYNC_RECHECK)
    assert capacity_requested(h)
    assert (h.gpus(), h.status()["activeFlavor"]) == ("2", "a10")

    # The a100 node has 4 GPUs free, not the 8 a pod asks for. Stay, and look again later.
    bound = fill_capacity(
        h, [gpu_node("a100-0", "a100", 8), gpu_node("a10-0", "a10", 8)], [bound_pod("other", "a100-0", 4)]
    )
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=30.0)
    assert (h.gpus(), h.status()["activeFlavor"]) == ("2", "a10")

    # The other pod is gone: room for one pod of 8 GPUs, all this Service needs. Back to a100, said once.
    bound.delete(bound_pod("other", "a100-0", 4))
    h.clock.step(30)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=30.0)
    assert (h.gpus(), h.status()["activeFlavor"], h.status()["activeFlavorTime"]) == (
        "8",
        "a100",
        "2024-01-01T00:01:30Z",
    )
    assert (
        "Normal",
        "FlavorReturn",
        "Moved back from flavor a10 to a100: its nodes have room for 1 more pods on 1 nodes",
    ) in h.events.events
    h.caught_up()
    assert await reconciler.reconcile(Request("ns", "svc")) == Result()  # on the first flavor: nothing to check


async def test_without_return_the_service_stays_on_the_flavor_it_moved_to() -> None:
    h = FlavorHarness()
    reconciler = h.reconciler()
    await _moved_to_a10(h, reconciler)
    h.clock.step(600)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result()
    assert (h.gpus(), h.status()["activeFlavor"]) == ("2", "a10")
    assert not capacity_requested(h)


async def test_a_cordoned_node_of_the_better_flavor_has_no_room() -> None:
    h = FlavorHarness()
    reconciler = h.reconciler(CONFIG + "flavor-return-when-fits: true\n")
    cordoned = gpu_node("a100-0", "a100", 8)
    cordoned["spec"]["unschedulable"] = True
    await _moved_to_a10(h, reconciler)
    fill_capacity(h, [cordoned], [])
    h.clock.step(30)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue_after=30.0)
    assert h.status()["activeFlavor"] == "a10"

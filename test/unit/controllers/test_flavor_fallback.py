"""The Service reconciler moves to the next flavor when its pods wait a full fallback period for a node, records
it (status, Warning Event), and says so when no flavor is left; level-triggered: it requeues for the remaining time.

The reconciler runs once per call, on fake caches and a fake clock, with a client that records writes.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from llmaz.controllers import indexes as ix
from llmaz.controllers import resources as r
from llmaz.controllers.service import ServiceReconciler
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.resource import Resource
from llmaz.settings import SettingsHolder

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

    def reconciler(self) -> ServiceReconciler:
        settings = SettingsHolder()
        settings.update({"data": {"config.data": CONFIG}})
        return ServiceReconciler(self.client, self.source, self.events, self.clock, settings)  # type: ignore[arg-type]

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

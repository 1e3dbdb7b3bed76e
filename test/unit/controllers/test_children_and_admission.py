"""The reconcilers write no child over an object they do not control, and none for an object the webhook would
deny: each says why in `Progressing=False`/`AbortProcessing` and a Warning Event; a conflict is retried through
the rate limiter, an invalid object only when it changes. The children they do write cost one write each: a
Playground's Service is created with the scheduler name, and `Applied` Events mark creations only.

The reconcilers run once per call, on fake caches, with a client that records writes.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import resources as r
from llmaz.controllers import indexes as ix
from llmaz.controllers.flavors.capacity import NodeCapacity
from llmaz.controllers.playground import PlaygroundReconciler
from llmaz.controllers.service import ServiceReconciler
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.client.errors import error_from_status
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.resource import Resource
from llmaz.runtime.webhook import AdmissionRequest, GroupVersionKind
from llmaz.webhooks import webhooks
from llmaz_dev.testing import FakeClock, FakeInformerSource

INFERENCE = "inference.llmaz.io/v1alpha1"
GLOBAL_CONFIG = {"data": {"config.data": "init-container-image: inftyai/model-loader:v0.0.10\n"}}
RUNNER = {"name": "model-runner", "image": "engine:v1"}


class RecordingClient:
    """Records writes; a read finds nothing, so what exists is what the fake caches hold."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, str]] = []
        self.applied_objects: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str]] = []
        self.statuses: list[dict[str, Any]] = []
        self.read: list[tuple[str, str]] = []

    async def get(self, resource: Resource, name: str, namespace: str | None = None, **opts: Any) -> dict[str, Any]:
        self.read.append((resource.kind, name))
        raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})

    async def apply(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.applied.append((resource.kind, obj["metadata"]["name"]))
        self.applied_objects.append(obj)
        return obj

    async def patch(self, resource: Resource, name: str, patch: dict[str, Any], *args: Any, **opts: Any) -> Any:
        self.patched.append((resource.kind, name))
        raise AssertionError(f"unexpected patch of {resource.kind} {name}: {patch}")

    async def update_status(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.statuses.append(obj["status"])
        return obj


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, note: str) -> None:
        self.events.append((type_, reason, note))


def _meta(name: str, uid: str) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "7", "generation": 1}


def _model() -> dict[str, Any]:
    source = {"modelHub": {"modelID": "meta-llama/Meta-Llama-3-8B"}}
    meta = {"name": "m", "uid": "m-uid", "resourceVersion": "1"}
    return {"metadata": meta, "spec": {"familyName": "llama3", "source": source}}


def _backend() -> dict[str, Any]:
    configs = [{"name": "default", "args": ["--model", "{{ .ModelPath }}"]}]
    spec = {"image": "engine", "version": "v1", "recommendedConfigs": configs}
    return {"metadata": {"name": "vllm", "uid": "b-uid", "resourceVersion": "1"}, "spec": spec}


def _service(**workload: Any) -> dict[str, Any]:
    worker = {"spec": {"schedulerName": "default-scheduler", "containers": [RUNNER]}}
    return {
        "apiVersion": INFERENCE,
        "kind": "Service",
        "metadata": _meta("svc", "svc-uid"),
        "spec": {
            "modelClaims": {"models": [{"name": "m"}]},
            "workloadTemplate": {"workerTemplate": worker, **workload},
        },
    }


def _playground(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": INFERENCE,
        "kind": "Playground",
        "metadata": _meta("pg", "pg-uid"),
        "spec": {"modelClaim": {"modelName": "m"}, **spec},
    }


def _foreign(name: str, controller: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"{name}-foreign", "resourceVersion": "3"}
    return {"metadata": {**meta, **({"ownerReferences": [controller]} if controller else {})}, "spec": {}}


def _progressing(status: dict[str, Any]) -> tuple[str, str, str]:
    found = next(c for c in status["conditions"] if c["type"] == "Progressing")
    return found["status"], found["reason"], found["message"]


async def _denial(kind: str, obj: dict[str, Any]) -> str:
    """What the validating webhook answers for creating `obj`."""
    hook = next(h for h in webhooks() if h.name == f"v{kind.lower()}.kb.io")
    gvk = GroupVersionKind("inference.llmaz.io", "v1alpha1", kind)
    response = await hook.handler(AdmissionRequest("uid", gvk, "CREATE", obj["metadata"]["name"], object=obj))
    assert not response.allowed
    return response.message


class Harness:
    def __init__(self) -> None:
        self.source = FakeInformerSource()
        self.client = RecordingClient()
        self.events = RecordingEvents()
        self.clock = FakeClock()
        self.source.informer_for(r.OPEN_MODELS).add(_model())
        self.source.informer_for(r.BACKEND_RUNTIMES).add(_backend())
        pods = self.source.informer_for(r.PODS, label_selector=ix.MODEL_POD_SELECTOR)
        pods.add_indexers({ix.POD_SERVICE: ix.pod_service})
        ix.add_serving_indexes(self.source.informer_for(r.PLAYGROUNDS), self.source.informer_for(r.INFERENCE_SERVICES))

    def add(self, resource: Resource, obj: dict[str, Any]) -> None:
        self.source.informer_for(resource).add(obj)

    def service_reconciler(self) -> ServiceReconciler:
        settings = SettingsHolder()
        settings.update(GLOBAL_CONFIG)
        return ServiceReconciler(
            self.client, self.source, self.events, self.clock, settings, capacity=NodeCapacity(self.source)
        )

    def playground_reconciler(self, settings: SettingsHolder | None = None) -> PlaygroundReconciler:
        return PlaygroundReconciler(self.client, self.source, self.events, self.clock, settings)  # type: ignore[arg-type]

    def written_back(self, resource: Resource, obj: dict[str, Any]) -> None:
        """The cache catching up with the last status write."""
        self.source.informer_for(resource).update({**obj, "status": self.client.statuses[-1]})


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": True}
SERVICE_CHILDREN = [
    (r.LEADER_WORKER_SETS, "svc", "LeaderWorkerSet ns/svc is controlled by Deployment web", DEPLOYMENT),
    (r.SERVICES, "svc-lb", "Service ns/svc-lb has no controller owner", None),
]


@pytest.mark.parametrize(("resource", "name", "conflict", "controller"), SERVICE_CHILDREN, ids=["lws", "lb"])
async def test_a_service_leaves_a_child_it_does_not_control_alone_and_retries_with_backoff(
    resource: Resource, name: str, conflict: str, controller: dict[str, Any] | None
) -> None:
    h = Harness()
    service = _service()
    h.add(r.INFERENCE_SERVICES, service)
    h.add(resource, _foreign(name, controller))
    reconciler = h.service_reconciler()

    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue=True)
    message = f"Not taking over objects that this inference Service does not control: {conflict}"
    assert h.client.applied == []
    assert _progressing(h.client.statuses[-1]) == ("False", "AbortProcessing", message)
    assert h.events.events == [("Warning", "ChildConflict", message)]

    # Retried: still blocked, and nothing is written or reported again.
    h.written_back(r.INFERENCE_SERVICES, service)
    assert await reconciler.reconcile(Request("ns", "svc")) == Result(requeue=True)
    assert (len(h.client.statuses), len(h.events.events), h.client.applied) == (1, 1, [])

    # The user deletes it: the next reconcile creates the Service's own child.
    h.source.informer_for(resource).delete(_foreign(name, controller))
    assert await reconciler.reconcile(Request("ns", "svc")) == Result()
    assert h.client.applied == [("LeaderWorkerSet", "svc"), ("Service", "svc-lb")]
    assert _progressing(h.client.statuses[-1])[:2] == ("True", "ServiceInProgress")


async def test_a_service_takes_over_the_leftovers_of_a_deleted_service_of_its_name() -> None:
    h = Harness()
    h.add(r.INFERENCE_SERVICES, _service())
    earlier = {"apiVersion": INFERENCE, "kind": "Service", "name": "svc", "uid": "deleted-uid", "controller": True}
    h.add(r.LEADER_WORKER_SETS, _foreign("svc", earlier))
    assert await h.service_reconciler().reconcile(Request("ns", "svc")) == Result()
    assert h.client.applied == [("LeaderWorkerSet", "svc"), ("Service", "svc-lb")]


@pytest.mark.parametrize(
    "workload",
    [{"size": 0}, {"workerTemplate": {"spec": {"containers": []}}}],
    ids=["size 0", "no containers"],
)
async def test_a_service_the_webhook_would_deny_gets_its_message_and_no_children(workload: dict[str, Any]) -> None:
    h = Harness()
    service = _service(**workload)
    h.add(r.INFERENCE_SERVICES, service)

    assert await h.service_reconciler().reconcile(Request("ns", "svc")) == Result()  # no retry until it changes
    denial = await _denial("Service", service)
    assert h.client.applied == []
    assert _progressing(h.client.statuses[-1]) == ("False", "AbortProcessing", denial)
    assert h.events.events == [("Warning", "InvalidSpec", denial)]


async def test_a_playground_with_both_model_claims_gets_the_webhook_message_and_no_service() -> None:
    h = Harness()
    playground = _playground(modelClaims={"models": [{"name": "m"}]})
    h.add(r.PLAYGROUNDS, playground)

    assert await h.playground_reconciler().reconcile(Request("ns", "pg")) == Result()
    denial = await _denial("Playground", playground)
    assert denial == "spec: Forbidden: modelClaim and modelClaims couldn't be both not nil"
    assert h.client.applied == []
    assert _progressing(h.client.statuses[-1]) == ("False", "AbortProcessing", denial)
    assert h.events.events == [("Warning", "InvalidSpec", denial)]


async def test_a_playground_leaves_a_foreign_service_of_its_name_alone_and_retries_with_backoff() -> None:
    h = Harness()
    h.add(r.PLAYGROUNDS, _playground())
    h.add(r.INFERENCE_SERVICES, _foreign("pg"))

    assert await h.playground_reconciler().reconcile(Request("ns", "pg")) == Result(requeue=True)
    message = "Playground owns the same name with an existing Service: inference Service ns/pg has no controller owner"
    assert h.client.applied == []
    assert _progressing(h.client.statuses[-1]) == ("False", "AbortProcessing", message)
    assert h.events.events == [("Warning", "ChildConflict", message)]


async def test_a_playground_applies_nothing_while_an_hpa_it_does_not_control_holds_the_name() -> None:
    h = Harness()
    elastic = {"minReplicas": 1, "maxReplicas": 3, "scaleTrigger": {"hpa": {"metrics": []}}}
    h.add(r.PLAYGROUNDS, _playground(elasticConfig=elastic))
    h.add(r.HORIZONTAL_POD_AUTOSCALERS, _foreign("pg", DEPLOYMENT))

    assert await h.playground_reconciler().reconcile(Request("ns", "pg")) == Result(requeue=True)
    conflict = "HorizontalPodAutoscaler ns/pg is controlled by Deployment web"
    message = f"Not taking over objects that this Playground does not control: {conflict}"
    assert h.client.applied == []
    assert _progressing(h.client.statuses[-1]) == ("False", "AbortProcessing", message)
    assert h.events.events == [("Warning", "ChildConflict", message)]


def _settings(scheduler: str) -> SettingsHolder:
    settings = SettingsHolder()
    config = f"init-container-image: inftyai/model-loader:v0.0.10\nscheduler-name: {scheduler}\n"
    settings.update({"data": {"config.data": config}})
    return settings


def _scheduler_name(service: dict[str, Any]) -> str | None:
    spec: dict[str, Any] = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]
    return spec.get("schedulerName")


async def test_a_playground_s_service_carries_the_scheduler_name_from_its_creation_and_keeps_it() -> None:
    h = Harness()
    h.add(r.PLAYGROUNDS, _playground())
    playgrounds = h.playground_reconciler(_settings("custom-scheduler"))

    assert await playgrounds.reconcile(Request("ns", "pg")) == Result()
    (service,) = h.client.applied_objects
    assert _scheduler_name(service) == "custom-scheduler"
    assert h.events.events == [("Normal", "Applied", "Applied inference Service ns/pg")]

    # The Service controller finds the name there: no patch (the recording client fails on one), one LWS apply.
    h.add(
        r.INFERENCE_SERVICES, {**service, "metadata": {**service["metadata"], "uid": "svc-uid", "resourceVersion": "8"}}
    )
    settings = _settings("custom-scheduler")
    services = ServiceReconciler(h.client, h.source, h.events, h.clock, settings, capacity=NodeCapacity(h.source))
    assert await services.reconcile(Request("ns", "pg")) == Result()
    assert h.client.patched == []
    assert h.client.applied[1:] == [("LeaderWorkerSet", "pg"), ("Service", "pg-lb")]
    assert h.events.events[1:] == [("Normal", "Applied", "Applied LeaderWorkerSet ns/pg")]

    # A changed global name is not carried into an existing Service (llmaz persists it once): no pods roll.
    playgrounds = h.playground_reconciler(_settings("another-scheduler"))
    h.source.informer_for(r.PLAYGROUNDS).update(_playground(replicas=2))
    assert await playgrounds.reconcile(Request("ns", "pg")) == Result()
    assert _scheduler_name(h.client.applied_objects[-1]) == "custom-scheduler"
    assert h.client.applied_objects[-1]["spec"]["replicas"] == 2


async def test_applied_events_mark_the_creation_of_a_child_not_its_updates() -> None:
    h = Harness()
    h.add(r.PLAYGROUNDS, _playground())
    playgrounds = h.playground_reconciler(_settings("default-scheduler"))
    assert await playgrounds.reconcile(Request("ns", "pg")) == Result()
    created = h.client.applied_objects[-1]
    h.add(r.INFERENCE_SERVICES, created)

    h.source.informer_for(r.PLAYGROUNDS).update(_playground(replicas=3))
    assert await playgrounds.reconcile(Request("ns", "pg")) == Result()
    assert h.client.applied == [("Service", "pg"), ("Service", "pg")]  # written again: the replicas changed
    assert h.events.events == [("Normal", "Applied", "Applied inference Service ns/pg")]


async def test_without_the_global_config_a_playground_s_service_names_no_scheduler() -> None:
    h = Harness()
    h.add(r.PLAYGROUNDS, _playground())
    assert await h.playground_reconciler().reconcile(Request("ns", "pg")) == Result()
    assert _scheduler_name(h.client.applied_objects[-1]) is None  # the Service controller persists it later

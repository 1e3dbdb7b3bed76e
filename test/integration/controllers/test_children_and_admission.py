"""On a real API server: the controllers leave alone an object they do not control that holds a child's name,
and build nothing for an object stored without admission that the webhook would deny.

The manager runs without webhooks here, so creating an invalid object is exactly "stored without admission"
(before the webhooks were installed, or while a `failurePolicy: Ignore` webhook was down).
"""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.resource import Resource
from llmaz.runtime.webhook import AdmissionRequest, GroupVersionKind
from llmaz.webhooks import webhooks
from llmaz_dev.testing.waiting import eventually

from .objects import conditions, get_or_none, open_model, playground

INFERENCE = "inference.llmaz.io/v1alpha1"


def _service(namespace: str, name: str, model: str, size: int = 1) -> dict[str, Any]:
    worker = {"spec": {"containers": [{"name": "model-runner", "image": "engine:v1"}]}}
    workload = {"workerTemplate": worker, "size": size}
    return {
        "apiVersion": INFERENCE,
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"modelClaims": {"models": [{"name": model}]}, "workloadTemplate": workload},
    }


def _user_lb_service(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"owner": "user"}},
        "spec": {"ports": [{"port": 9000, "targetPort": 9000}], "selector": {"app": "mine"}},
    }


def _user_lws(namespace: str, name: str) -> dict[str, Any]:
    worker = {"spec": {"containers": [{"name": "mine", "image": "mine:v1"}]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {"owner": "user"}},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": worker}},
    }


def _progressing(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    found = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"), None)
    return (found["status"], found["reason"], found["message"]) if found else None


async def _progressing_is(
    client: Client, resource: Resource, namespace: str, name: str, expected: tuple[str, str, str]
) -> dict[str, Any] | None:
    obj = await client.get(resource, name, namespace)
    return obj if _progressing(obj) == expected else None


async def _warning(client: Client, namespace: str, kind: str, reason: str) -> dict[str, Any] | None:
    events = (await client.list(EVENTS, namespace)).items
    found = [e for e in events if (e["type"], e["regarding"].get("kind"), e["reason"]) == ("Warning", kind, reason)]
    return found[0] if found else None


def _requeues(controller: str) -> float:
    labels = {"controller": controller, "result": "requeue"}
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) or 0.0


async def _denial(kind: str, obj: dict[str, Any]) -> str:
    """What the validating webhook would have answered when `obj` was created."""
    hook = next(h for h in webhooks() if h.name == f"v{kind.lower()}.kb.io")
    gvk = GroupVersionKind("inference.llmaz.io", "v1alpha1", kind)
    request = AdmissionRequest("uid", gvk, "CREATE", obj["metadata"]["name"], obj["metadata"]["namespace"], obj)
    response = await hook.handler(request)
    assert not response.allowed
    return response.message


def _controlled_by(obj: dict[str, Any] | None, uid: str) -> bool:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def _aborted(message: str) -> tuple[str, str, str]:
    return ("False", "AbortProcessing", message)


async def _own_child(client: Client, resource: Resource, name: str, namespace: str, uid: str) -> dict[str, Any] | None:
    obj = await get_or_none(client, resource, name, namespace)
    return obj if _controlled_by(obj, uid) else None


LB = (r.SERVICES, "svc-lb")
LWS = (r.LEADER_WORKER_SETS, "svc")


@pytest.mark.parametrize(
    ("child", "other", "user_object"),
    [(LB, LWS, _user_lb_service), (LWS, LB, _user_lws)],
    ids=["lb-service", "leader-worker-set"],
)
async def test_a_users_object_holding_a_childs_name_is_left_alone_until_deleted(
    manager: Manager,
    client: Client,
    namespace: str,
    child: tuple[Resource, str],
    other: tuple[Resource, str],
    user_object: Any,
) -> None:
    model = f"{namespace}-m"
    resource, name = child
    await client.create(r.OPEN_MODELS, open_model(model))
    mine = await client.create(resource, user_object(namespace, name))
    requeues = _requeues("service")
    service = await client.create(r.INFERENCE_SERVICES, _service(namespace, "svc", model))

    message = (
        "Not taking over objects that this inference Service does not control: "
        f"{resource.kind} {namespace}/{name} has no controller owner"
    )
    await eventually(lambda: _progressing_is(client, r.INFERENCE_SERVICES, namespace, "svc", _aborted(message)))
    event = await eventually(lambda: _warning(client, namespace, "Service", "ChildConflict"))
    assert event["note"] == message
    # Retried through the rate limiter, and every retry leaves the user's object as it was and applies nothing.
    await eventually(lambda: _requeues("service") >= requeues + 3, what="rate-limited retries")
    untouched = await client.get(resource, name, namespace)
    assert untouched["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]
    assert "ownerReferences" not in untouched["metadata"]
    assert await get_or_none(client, *other, namespace) is None

    # The user deletes it: the Service is woken (its watch maps children by name) and creates its own.
    await client.delete(resource, name, namespace)
    uid = service["metadata"]["uid"]
    await eventually(lambda: _own_child(client, resource, name, namespace, uid), what=f"the Service's own {name}")
    await eventually(lambda: _own_child(client, *other, namespace, uid), what=f"the Service's own {other[1]}")
    progressing = ("True", "ServiceInProgress", "Inference Service is progressing")
    svc = await eventually(lambda: _progressing_is(client, r.INFERENCE_SERVICES, namespace, "svc", progressing))
    assert conditions(svc) == {"Progressing": ("True", "ServiceInProgress")}


async def test_a_playground_stored_with_both_model_claims_gets_the_webhook_message_and_no_service(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    invalid = playground(namespace, "pg", model, modelClaims={"models": [{"name": model}]})
    await client.create(r.PLAYGROUNDS, invalid)

    denial = await _denial("Playground", invalid)
    assert denial == "spec: Forbidden: modelClaim and modelClaims couldn't be both not nil"
    await eventually(lambda: _progressing_is(client, r.PLAYGROUNDS, namespace, "pg", _aborted(denial)))
    event = await eventually(lambda: _warning(client, namespace, "Playground", "InvalidSpec"))
    assert event["note"] == denial
    # The reconcile that wrote the condition is the one that would have applied the Service, before it.
    assert await get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace) is None

    # Fixed by an edit: the edit's own event reconciles it, and the Service appears.
    await client.patch(r.PLAYGROUNDS, "pg", {"spec": {"modelClaims": None}}, namespace)  # a merge patch
    await eventually(lambda: get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace), what="the Service")
    await eventually(
        lambda: _progressing_is(
            client, r.PLAYGROUNDS, namespace, "pg", ("True", "Pending", "Waiting for inference Service ready")
        )
    )


async def test_an_inference_service_stored_with_workload_size_0_gets_the_webhook_message_and_no_workload(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    invalid = _service(namespace, "svc", model, size=0)
    await client.create(r.INFERENCE_SERVICES, invalid)

    denial = await _denial("Service", invalid)
    assert denial == "spec.workloadTemplate.size: Invalid value: 0: must be greater than or equal to 1"
    await eventually(lambda: _progressing_is(client, r.INFERENCE_SERVICES, namespace, "svc", _aborted(denial)))
    event = await eventually(lambda: _warning(client, namespace, "Service", "InvalidSpec"))
    assert event["note"] == denial
    assert await get_or_none(client, r.LEADER_WORKER_SETS, "svc", namespace) is None
    assert await get_or_none(client, r.SERVICES, "svc-lb", namespace) is None

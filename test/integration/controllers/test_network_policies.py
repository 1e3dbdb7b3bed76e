"""On a real API server: a Playground annotated `llmaz.io/network-policy: gateway-only` gets, through its inference
Service, a NetworkPolicy the Service controls, applied again when deleted and removed when the annotation goes;
someone else's policy of the name is left alone, reported as a conflict while the policy is asked for, and never
deleted when it is not.

No controller-manager runs here, so garbage collection does not: ownership is asserted on the ownerReference.
"""

from __future__ import annotations

from typing import Any

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground

ANNOTATION = "llmaz.io/network-policy"


def _annotated(namespace: str, name: str, model: str, annotations: dict[str, str]) -> dict[str, Any]:
    obj = playground(namespace, name, model)
    obj["metadata"]["annotations"] = annotations
    return obj


def _controller_uid(obj: dict[str, Any] | None) -> str | None:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return next((ref["uid"] for ref in refs if ref.get("controller")), None)


async def _service_uid(client: Client, namespace: str, name: str) -> str | None:
    service = await get_or_none(client, r.INFERENCE_SERVICES, name, namespace)
    uid = (service or {}).get("metadata", {}).get("uid")
    return str(uid) if uid is not None else None


async def _own_policy(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    policy = await get_or_none(client, r.NETWORK_POLICIES, name, namespace)
    uid = await _service_uid(client, namespace, name)
    return policy if uid is not None and _controller_uid(policy) == uid else None


async def _policy_gone(client: Client, namespace: str, name: str) -> bool:
    return await get_or_none(client, r.NETWORK_POLICIES, name, namespace) is None


async def _set_annotations(client: Client, namespace: str, name: str, annotations: dict[str, str]) -> None:
    current = await client.get(r.PLAYGROUNDS, name, namespace)
    current["metadata"]["annotations"] = annotations
    await client.update(r.PLAYGROUNDS, current)


async def test_an_annotated_playground_gets_a_policy_applied_again_when_deleted_and_removed_when_the_annotation_goes(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, _annotated(namespace, "pg", model, {ANNOTATION: "gateway-only"}))

    policy = await eventually(lambda: _own_policy(client, namespace, "pg"), what="the Service's NetworkPolicy")
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmaz"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "pg"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    gateway, own_namespace = policy["spec"]["ingress"]
    assert gateway["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llmaz-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}},
        }
    ]
    assert gateway["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert own_namespace == {"from": [{"podSelector": {}}]}
    lb = await eventually(lambda: get_or_none(client, r.SERVICES, "pg-lb", namespace), what="the -lb Service")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= lb["spec"]["selector"].items()

    # Deleted by hand: the policy watch wakes the Service, which applies it again.
    await client.delete(r.NETWORK_POLICIES, "pg", namespace)

    async def applied_again() -> dict[str, Any] | None:
        again = await _own_policy(client, namespace, "pg")
        return again if again is not None and again["metadata"]["uid"] != policy["metadata"]["uid"] else None

    await eventually(applied_again, what="the NetworkPolicy applied again")

    # The annotation goes from the Playground, then from its Service: the policy is deleted.
    await _set_annotations(client, namespace, "pg", {})
    await eventually(lambda: _policy_gone(client, namespace, "pg"), what="the NetworkPolicy to be deleted")


async def test_someone_elses_policy_of_the_name_is_left_alone_asked_for_or_not(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    theirs = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "pg", "labels": {"owner": "user"}},
        "spec": {"podSelector": {"matchLabels": {"app": "mine"}}, "policyTypes": ["Ingress"]},
    }
    mine = await client.create(r.NETWORK_POLICIES, theirs, namespace)
    # Not asked for: the Service is made and the user's policy is not deleted.
    await client.create(r.PLAYGROUNDS, _annotated(namespace, "pg", model, {}))
    await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace), what="the LeaderWorkerSet")

    # Asked for: a conflict on the Service, and the user's policy as it was.
    await _set_annotations(client, namespace, "pg", {ANNOTATION: "gateway-only"})
    message = (
        "Not taking over objects that this inference Service does not control: "
        f"NetworkPolicy {namespace}/pg has no controller owner"
    )

    async def conflict_reported() -> bool:
        service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        found = [c for c in (service.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"]
        return bool(found) and found[0]["reason"] == "AbortProcessing" and found[0]["message"].startswith(message)

    await eventually(conflict_reported, what="the Service to report the NetworkPolicy in its way")
    untouched = await client.get(r.NETWORK_POLICIES, "pg", namespace)
    assert untouched["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]
    assert "ownerReferences" not in untouched["metadata"]

    # No longer asked for: still not deleted, nor changed.
    await _set_annotations(client, namespace, "pg", {ANNOTATION: "none"})

    async def service_annotation_is_none() -> bool:
        service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        return bool((service["metadata"].get("annotations") or {}).get(ANNOTATION) == "none")

    await eventually(service_annotation_is_none, what="the Playground's annotation on its Service")

    async def conflict_cleared() -> bool:
        service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        found = [c for c in (service.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"]
        return bool(found) and found[0]["reason"] != "AbortProcessing"

    # Reconciled with the annotation's new value: the conflict is gone from its status.
    await eventually(conflict_cleared, what="the Service to stop reporting the conflict")
    kept = await client.get(r.NETWORK_POLICIES, "pg", namespace)
    assert kept["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]

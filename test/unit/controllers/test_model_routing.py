"""A Playground whose model name another namespace owns is told, in `ModelRouted=False`/`ModelNameTaken` and one
Warning Event, that llmaz-gateway sends it no request, and how to fix it, without naming the other namespace; the
owner is told nothing. Both reach that view from the same caches, and it clears when the owner goes."""

from __future__ import annotations

from typing import Any

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.controllers import indexes as ix
from llmaz.runtime.controller import Request, Result

from .test_children_and_admission import INFERENCE, Harness

FIRST, LATER = "2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z"


def claimant(namespace: str, created: str, name: str = "demo", kind: str = "Playground") -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": f"{namespace}-{name}",
        "resourceVersion": "7",
        "generation": 1,
        "creationTimestamp": created,
    }
    spec: dict[str, Any] = {"modelClaim": {"modelName": "m"}}
    if kind == "Service":
        spec = {"modelClaims": {"models": [{"name": "m"}]}, "workloadTemplate": {}}
    return {"apiVersion": INFERENCE, "kind": kind, "metadata": meta, "spec": spec}


def routed(status: dict[str, Any]) -> tuple[str, str, str] | None:
    found = next((cond for cond in status.get("conditions", ()) if cond["type"] == c.CONDITION_MODEL_ROUTED), None)
    return None if found is None else (found["status"], found["reason"], found["message"])


async def reconcile(h: Harness, obj: dict[str, Any]) -> dict[str, Any]:
    """One reconcile of the Playground `obj`, and the status it wrote, written back to the cache."""
    meta = obj["metadata"]
    written = len(h.client.statuses)
    assert await h.playground_reconciler().reconcile(Request(meta["namespace"], meta["name"])) == Result()
    cached = h.source.informer_for(r.PLAYGROUNDS).store.get(f"{meta['namespace']}/{meta['name']}")
    assert cached is not None
    if len(h.client.statuses) > written:
        h.written_back(r.PLAYGROUNDS, cached)
        return h.client.statuses[-1]
    return dict(cached.get("status") or {})


def warnings(h: Harness) -> list[tuple[str, str, str]]:
    return [e for e in h.events.events if e[1] in (c.REASON_MODEL_NAME_TAKEN, c.REASON_MODEL_NAME_OWNED)]


async def test_the_later_namespace_is_told_once_and_the_owner_never() -> None:
    h = Harness()
    owner, copy = claimant("team-a", FIRST), claimant("team-b", LATER)
    h.add(r.PLAYGROUNDS, owner)
    h.add(r.PLAYGROUNDS, copy)

    assert routed(await reconcile(h, owner)) is None
    status = await reconcile(h, copy)
    taken = routed(status)
    assert taken is not None
    assert taken[:2] == ("False", "ModelNameTaken")
    message = taken[2]
    assert "model m is served from another namespace" in message
    assert 'llmaz.io/serve-across-namespaces: "true"' in message
    assert "team-a" not in message  # the other tenant is never named
    assert "demo" not in message
    assert warnings(h) == [("Warning", "ModelNameTaken", message)]

    # Level-triggered and idempotent: reconciled again, nothing is written or reported again.
    statuses = len(h.client.statuses)
    await reconcile(h, copy)
    await reconcile(h, owner)
    assert len(h.client.statuses) == statuses
    assert len(warnings(h)) == 1


async def test_the_condition_clears_when_the_owner_is_deleted() -> None:
    h = Harness()
    owner, copy = claimant("team-a", FIRST), claimant("team-b", LATER)
    h.add(r.PLAYGROUNDS, owner)
    h.add(r.PLAYGROUNDS, copy)
    await reconcile(h, copy)
    h.source.informer_for(r.PLAYGROUNDS).delete(owner)

    assert routed(await reconcile(h, copy)) == (
        "True",
        "ModelNameOwned",
        "llmaz-gateway routes requests for model m to this Playground",
    )
    assert [e[:2] for e in warnings(h)] == [("Warning", "ModelNameTaken"), ("Normal", "ModelNameOwned")]


async def test_an_older_standalone_inference_service_owns_the_name_as_the_gateway_counts_it() -> None:
    h = Harness()
    h.add(r.INFERENCE_SERVICES, claimant("team-a", FIRST, "svc", kind="Service"))
    playground = claimant("team-b", LATER)
    h.add(r.PLAYGROUNDS, playground)
    assert (routed(await reconcile(h, playground)) or ("",))[0] == "False"


async def test_with_the_open_models_opt_in_no_namespace_is_told() -> None:
    h = Harness()
    model = h.source.informer_for(r.OPEN_MODELS).store.get("m")
    assert model is not None
    h.source.informer_for(r.OPEN_MODELS).update(
        {**model, "metadata": {**model["metadata"], "annotations": {c.SERVE_ACROSS_NAMESPACES_ANNOTATION: "true"}}}
    )
    owner, copy = claimant("team-a", FIRST), claimant("team-b", LATER)
    h.add(r.PLAYGROUNDS, owner)
    h.add(r.PLAYGROUNDS, copy)
    assert routed(await reconcile(h, copy)) is None
    assert warnings(h) == []


def test_a_claimants_change_wakes_every_playground_claiming_the_model_it_served_or_serves() -> None:
    h = Harness()
    for namespace in ("a", "b"):
        h.add(r.PLAYGROUNDS, claimant(namespace, FIRST))
    h.add(r.PLAYGROUNDS, {**claimant("c", FIRST), "spec": {"modelClaim": {"modelName": "other"}}})
    mapper = ix.claimants_of(h.source.informer_for(r.PLAYGROUNDS).store)
    service = claimant("d", LATER, "svc", kind="Service")
    assert sorted(req.key for req in mapper(service)) == ["a/demo", "b/demo"]
    moved = {**service, "spec": {"modelClaims": {"models": [{"name": "other"}]}, "workloadTemplate": {}}}
    assert ix.claims_changed().update(service, moved)
    assert not ix.claims_changed().update(service, {**service, "metadata": {**service["metadata"], "labels": {}}})
    assert sorted(req.key for req in [*mapper(service), *mapper(moved)]) == ["a/demo", "b/demo", "c/demo"]

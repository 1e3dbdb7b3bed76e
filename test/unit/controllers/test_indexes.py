"""Index functions: which models and backend a Playground or Service uses."""

from __future__ import annotations

from typing import Any

from llmaz.controllers.indexes import (
    MODEL_POD_SELECTOR,
    controller_changed,
    owner_named_like,
    playground_backend,
    playground_models,
    pod_finding_changed,
    pod_service,
    service_models,
    service_of_pod,
)
from llmaz.runtime.controller import Request
from llmaz_dev.testing import FakeInformer


def _playground(rv: str, spec: dict[str, Any], uid: str) -> dict[str, Any]:
    """A Playground as the API server stores it: (uid, resourceVersion) names exactly one content."""
    return {"kind": "Playground", "metadata": {"name": "p", "uid": uid, "resourceVersion": rv}, "spec": spec}


def test_a_playground_is_indexed_by_every_claimed_model_and_its_backend() -> None:
    obj = _playground(
        "1",
        {
            "modelClaims": {"models": [{"name": "main"}, {"name": "draft", "role": "draft"}]},
            "backendRuntimeConfig": {"backendName": "llamacpp"},
        },
        uid="claims",
    )
    assert playground_models(obj) == ["draft", "main"]
    assert playground_backend(obj) == ["llamacpp"]


def test_a_new_resource_version_of_the_same_playground_is_indexed_afresh() -> None:
    assert playground_models(_playground("1", {"modelClaim": {"modelName": "a"}}, uid="edited")) == ["a"]
    assert playground_models(_playground("2", {"modelClaim": {"modelName": "b"}}, uid="edited")) == ["b"]
    assert playground_backend(_playground("2", {"modelClaim": {"modelName": "b"}}, uid="edited")) == ["vllm"]


def test_objects_without_identity_are_never_served_from_the_last_parse() -> None:
    first = {"kind": "Playground", "metadata": {"name": "p"}, "spec": {"modelClaim": {"modelName": "a"}}}
    second = {"kind": "Playground", "metadata": {"name": "q"}, "spec": {"modelClaim": {"modelName": "b"}}}
    assert playground_models(first) == ["a"]
    assert playground_models(second) == ["b"]


def test_objects_that_do_not_match_the_schema_are_in_no_index() -> None:
    broken = _playground("9", {"replicas": "many"}, uid="broken")
    assert playground_models(broken) == []
    assert playground_backend(broken) == []
    assert service_models({"kind": "Service", "metadata": {"name": "s"}, "spec": {}}) == []


def _pod(labels: dict[str, str], loader_exit: int | None = None, ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if loader_exit is not None:
        terminated = {"exitCode": loader_exit, "message": "NotFound: x"}
        status["initContainerStatuses"] = [{"name": "model-loader", "state": {"terminated": terminated}}]
    return {
        "metadata": {"name": "pg-0", "namespace": "ns", "labels": labels},
        "spec": {"initContainers": [{"name": "model-loader"}], "containers": [{"name": "model-runner"}]},
        "status": status,
    }


LWS_POD = {"leaderworkerset.sigs.k8s.io/name": "pg", "llmaz.io/model-name": "m"}


def test_only_pods_of_llmaz_leader_worker_sets_are_selected() -> None:
    assert MODEL_POD_SELECTOR == "leaderworkerset.sigs.k8s.io/name,llmaz.io/model-name"


def test_a_model_pod_belongs_to_the_service_named_like_its_leader_worker_set() -> None:
    assert pod_service(_pod(LWS_POD)) == ["ns/pg"]
    assert service_of_pod(_pod(LWS_POD)) == [Request("ns", "pg")]
    assert pod_service(_pod({"llmaz.io/model-name": "m"})) == []
    assert service_of_pod(_pod({})) == []


def test_pod_updates_pass_only_when_the_finding_changes() -> None:
    changed = pod_finding_changed()
    healthy, failing = _pod(LWS_POD), _pod(LWS_POD, loader_exit=3)
    assert changed.update(healthy, failing)
    assert changed.update(failing, healthy)
    assert not changed.update(failing, {**failing, "metadata": {**failing["metadata"], "resourceVersion": "9"}})
    assert not changed.update(healthy, _pod(LWS_POD, ready=True))
    assert changed.create(healthy)
    assert changed.delete(healthy)


def _named(name: str, namespace: str = "ns", controller_uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if controller_uid:
        meta["ownerReferences"] = [{"kind": "Deployment", "name": "d", "uid": controller_uid, "controller": True}]
    return {"metadata": meta}


def test_a_child_wakes_the_existing_owner_named_like_it_whoever_controls_it() -> None:
    owners = FakeInformer()
    owners.add(_named("pg"))
    same_name, lb = owner_named_like(owners.store), owner_named_like(owners.store, "-lb")
    # A user's object in the way carries no owner reference to the owner, yet maps to it.
    assert same_name(_named("pg")) == [Request("ns", "pg")]
    assert same_name(_named("pg", controller_uid="someone-else")) == [Request("ns", "pg")]
    assert lb(_named("pg-lb")) == [Request("ns", "pg")]
    # No owner of that name in the cache, another namespace, or not the child's naming pattern: nothing.
    assert same_name(_named("web")) == []
    assert same_name(_named("pg", namespace="other")) == []
    assert lb(_named("pg")) == []
    assert lb(_named("-lb")) == []


def test_child_updates_pass_when_their_controller_changes() -> None:
    changed = controller_changed()
    free, taken = _named("pg"), _named("pg", controller_uid="u1")
    assert changed.update(free, taken)
    assert changed.update(taken, free)
    assert changed.update(taken, _named("pg", controller_uid="u2"))
    assert not changed.update(taken, _named("pg", controller_uid="u1"))

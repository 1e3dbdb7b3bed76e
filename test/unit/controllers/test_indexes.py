"""Index functions: which models and backend a Playground or Service uses."""

from __future__ import annotations

from typing import Any

from llmaz.controllers.indexes import playground_backend, playground_models, service_models


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

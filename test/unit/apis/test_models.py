"""The API models: samples round-trip, unknown fields survive, unset fields are omitted, enums are enforced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llmaz.apis import BackendRuntime, ModelHub, ModelRef, OpenModel, Playground, Service
from llmaz.apis.base import ApiModel

REPO = Path(__file__).resolve().parents[3]
KINDS: dict[str, type[ApiModel]] = {
    "OpenModel": OpenModel,
    "Playground": Playground,
    "Service": Service,
    "BackendRuntime": BackendRuntime,
}


# Kubernetes kinds in the samples of llmaz-gateway's features (API key Secrets, the Namespaces of the
# serve-across-namespaces sample): not llmaz's API, checked in test/unit/builders/test_gateway_samples.py. Any other
# kind fails below.
NOT_LLMAZ_KINDS = frozenset({"Secret", "Namespace"})


def _documents(directory: str) -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((REPO / directory).glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] in NOT_LLMAZ_KINDS:
                continue
            docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


SAMPLES = _documents("config/samples") + _documents("config/backends")


def test_there_is_a_sample_for_every_kind() -> None:
    assert {doc["kind"] for _, doc in SAMPLES} == set(KINDS)


@pytest.mark.parametrize(("name", "doc"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_every_sample_parses_and_reserialises_to_an_equal_document(name: str, doc: dict[str, Any]) -> None:
    model = KINDS[doc["kind"]].from_dict(doc)
    assert model.to_dict() == doc


def test_unknown_fields_from_a_newer_client_are_kept_at_every_level() -> None:
    doc = {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": "m", "managedFields": [{"manager": "kubectl"}]},
        "spec": {
            "familyName": "f",
            "source": {"modelHub": {"modelID": "a/b", "futureField": {"x": 1}}, "futureSource": "y"},
            "futureSpec": [1, 2],
        },
        "futureTopLevel": True,
    }
    assert OpenModel.from_dict(doc).to_dict() == doc


def test_unset_optional_fields_are_omitted_not_sent_as_null() -> None:
    model = OpenModel.from_dict(
        {"metadata": {"name": "m"}, "spec": {"familyName": "f", "source": {"uri": "host:///x"}}}
    )
    assert model.to_dict() == {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": "m"},
        "spec": {"familyName": "f", "source": {"uri": "host:///x"}},
    }


def test_empty_lists_are_kept_because_present_and_empty_differs_from_absent() -> None:
    hub = ModelHub.from_dict({"modelID": "a/b", "filename": "x.gguf", "allowPatterns": []})
    assert hub.allow_patterns == []
    assert hub.to_dict() == {"modelID": "a/b", "filename": "x.gguf", "allowPatterns": []}


def test_fields_are_reachable_by_python_name_and_serialised_by_json_name() -> None:
    # Without the pydantic mypy plugin, __init__ is typed with the explicit alias (modelID) only; validate_by_name
    # accepts the Python name at runtime, which is what this test checks.
    hub = ModelHub(model_id="a/b", allow_patterns=["*.json"])  # type: ignore[call-arg]
    assert hub.to_dict() == {"modelID": "a/b", "allowPatterns": ["*.json"]}


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (ModelHub, {"name": "GitHub"}),
        (ModelRef, {"name": "m", "role": "lora"}),
        (ModelRef, {"name": "m", "role": "Main"}),
    ],
)
def test_enums_reject_values_outside_the_crd_enum(model: type[ApiModel], doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.from_dict(doc)


@pytest.mark.parametrize("quantity", ["1.5.2", "ten", "1Gb", ""])
def test_malformed_quantities_are_rejected(quantity: str) -> None:
    with pytest.raises(ValidationError, match="quantities must match"):
        OpenModel.from_dict(
            {
                "metadata": {"name": "m"},
                "spec": {
                    "familyName": "f",
                    "source": {"uri": "host:///x"},
                    "inferenceConfig": {"flavors": [{"name": "a", "limits": {"nvidia.com/gpu": quantity}}]},
                },
            }
        )


@pytest.mark.parametrize(
    ("model", "doc", "missing"),
    [
        (OpenModel, {"metadata": {"name": "m"}, "spec": {"source": {}}}, "familyName"),
        (BackendRuntime, {"metadata": {"name": "b"}, "spec": {"image": "i"}}, "version"),
        (Service, {"metadata": {"name": "s"}, "spec": {}}, "workloadTemplate"),
    ],
)
def test_required_fields_are_required(model: type[ApiModel], doc: dict[str, Any], missing: str) -> None:
    with pytest.raises(ValidationError, match=missing):
        model.from_dict(doc)


def test_playground_status_always_serialises_replicas() -> None:
    playground = Playground.from_dict({"metadata": {"name": "p"}, "spec": {}, "status": {"conditions": []}})
    assert playground.status is not None
    assert playground.to_dict()["status"] == {"conditions": [], "replicas": 0}

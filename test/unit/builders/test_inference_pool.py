"""`build_inference_pool`: the InferencePool of a Playground selects exactly the pods its `-lb` Service selects, on
the engine port, names the endpoint picker Service `llmaz-epp` port 9002, and is controlled by the Playground."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Service
from llmaz.apis.gie_v1 import InferencePool
from llmaz.apis.pools import wants_pool
from llmaz.controllers.builders import build_inference_pool, build_lb_service, build_service

from .factories import NAMESPACE, PLAYGROUND_UID, llama3_8b, playground, vllm_test_copy

POOL = "llmaz.io/inference-pool"
MODE = "llmaz.io/inference-pool-failure-mode"


def test_worked_example() -> None:
    pool = build_inference_pool(playground(annotations={POOL: "true"}))
    assert pool == {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {
            "name": "playground-llama3-8b",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "llmaz"},
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Playground",
                    "name": "playground-llama3-8b",
                    "uid": PLAYGROUND_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "selector": {
                "matchLabels": {
                    "leaderworkerset.sigs.k8s.io/name": "playground-llama3-8b",
                    "leaderworkerset.sigs.k8s.io/worker-index": "0",
                }
            },
            "targetPorts": [{"number": 8080}],
            "endpointPickerRef": {
                "kind": "Service",
                "name": "llmaz-epp",
                "port": {"number": 9002},
                "failureMode": "FailClose",
            },
        },
    }


@pytest.mark.parametrize(
    ("annotations", "mode"),
    [
        ({POOL: "true"}, "FailClose"),
        ({POOL: "true", MODE: "FailClose"}, "FailClose"),
        ({POOL: "true", MODE: "FailOpen"}, "FailOpen"),
        # Stored without admission: read the safe way.
        ({POOL: "true", MODE: "failopen"}, "FailClose"),
        ({POOL: "true", MODE: ""}, "FailClose"),
    ],
)
def test_the_failure_mode_is_the_annotations(annotations: dict[str, str], mode: str) -> None:
    pool = build_inference_pool(playground(annotations=annotations))
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == mode


@pytest.mark.parametrize("name", ["a", "playground-llama3-8b", "x" * 52])
def test_the_selector_is_exactly_the_lb_services(name: str) -> None:
    pg = playground(annotations={POOL: "true"}, name=name)
    desired = build_service(pg, [llama3_8b()], vllm_test_copy())
    service = Service.from_dict({**desired, "metadata": {**desired["metadata"], "uid": "u"}})
    lb = build_lb_service(service, [llama3_8b()])
    pool = build_inference_pool(pg)
    assert pool["spec"]["selector"]["matchLabels"] == lb["spec"]["selector"]
    assert [port["number"] for port in pool["spec"]["targetPorts"]] == [p["targetPort"] for p in lb["spec"]["ports"]]
    assert pool["metadata"]["name"] == name


def test_the_picker_service_and_port_can_be_named() -> None:
    pool = build_inference_pool(playground(annotations={POOL: "true"}), epp_service="other", epp_port=9100)
    assert pool["spec"]["endpointPickerRef"]["name"] == "other"
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9100}


def test_the_pool_is_valid_against_the_api_model() -> None:
    built: dict[str, Any] = build_inference_pool(playground(annotations={POOL: "true", MODE: "FailOpen"}))
    assert InferencePool.from_dict(built).to_dict() == built


def test_a_playground_without_uid_cannot_own_a_pool() -> None:
    pg = playground(annotations={POOL: "true"})
    pg.metadata.uid = None
    with pytest.raises(ValueError, match="uid"):
        build_inference_pool(pg)


@pytest.mark.parametrize(
    ("annotations", "wanted"),
    [(None, False), ({}, False), ({POOL: "true"}, True), ({POOL: "false"}, False), ({POOL: "True"}, False)],
)
def test_only_true_asks_for_a_pool(annotations: dict[str, str] | None, wanted: bool) -> None:
    assert wants_pool(annotations) is wanted

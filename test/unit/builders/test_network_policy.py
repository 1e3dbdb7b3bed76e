"""`build_network_policy`: the gateway-only NetworkPolicy of an inference Service selects every pod of its
LeaderWorkerSet (the `-lb` Service's leaders among them, and a multi-host group's workers), admits llmaz-gateway's
pods of the gateway's namespace on the engine port and every pod of the Service's own namespace, and is controlled
by the Service. A Playground's annotation reaches its inference Service."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Service
from llmaz.apis.networkpolicy import parse_network_policy, wants_gateway_only
from llmaz.controllers.builders import build_lb_service, build_leader_worker_set, build_network_policy, build_service
from llmaz.webhooks.playground import validate_playground_annotations
from llmaz.webhooks.service import validate_service_annotations

from .factories import NAMESPACE, SERVICE_UID, llama3_8b, playground, runner, service, single_host_service
from .factories import vllm_test_copy as vllm

ANNOTATION = "llmaz.io/network-policy"


def test_worked_example() -> None:
    policy = build_network_policy(single_host_service(annotations={ANNOTATION: "gateway-only"}), "llmaz-system")
    assert policy == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "svc",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "llmaz"},
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Service",
                    "name": "svc",
                    "uid": SERVICE_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "podSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "svc"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llmaz-system"}},
                            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 8080}],
                },
                {"from": [{"podSelector": {}}]},
            ],
        },
    }


@pytest.mark.parametrize("gateway_namespace", ["llmaz-system", "gateways"])
def test_the_gateway_peer_is_in_the_gateway_namespace(gateway_namespace: str) -> None:
    policy = build_network_policy(single_host_service(), gateway_namespace)
    peer = policy["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": gateway_namespace}}


def test_the_gateway_reaches_the_port_the_lb_service_sends_to() -> None:
    svc = single_host_service()
    lb = build_lb_service(svc, [llama3_8b()])
    policy = build_network_policy(svc, "llmaz-system")
    assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == [p["targetPort"] for p in lb["spec"]["ports"]]


def test_the_selected_pods_include_the_lb_services_and_every_pod_of_a_multi_host_group() -> None:
    template = {"spec": {"containers": [runner()]}}
    multi = service(
        {
            "modelClaims": {"models": [{"name": "llama3-8b", "role": "main"}]},
            "workloadTemplate": {"leaderTemplate": template, "workerTemplate": template, "size": 2},
        }
    )
    selector = build_network_policy(multi, "llmaz-system")["spec"]["podSelector"]["matchLabels"]
    lb_selector = build_lb_service(multi, [llama3_8b()])["spec"]["selector"]
    assert selector.items() <= lb_selector.items()
    lws = build_leader_worker_set(multi, [llama3_8b()], "loader:v1")
    # LeaderWorkerSet labels every pod of every group with its name, leaders and workers alike.
    assert selector == {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"]}


def test_the_own_namespace_is_admitted_on_every_port() -> None:
    rule = build_network_policy(single_host_service(), "llmaz-system")["spec"]["ingress"][1]
    assert rule == {"from": [{"podSelector": {}}]}


def test_a_service_without_uid_cannot_own_a_policy() -> None:
    svc = single_host_service()
    svc.metadata.uid = None
    with pytest.raises(ValueError, match="uid"):
        build_network_policy(svc, "llmaz-system")


@pytest.mark.parametrize(
    ("annotations", "wanted"),
    [
        (None, False),
        ({}, False),
        ({ANNOTATION: "gateway-only"}, True),
        ({ANNOTATION: "none"}, False),
        # Stored without admission: no policy.
        ({ANNOTATION: "Gateway-Only"}, False),
        ({ANNOTATION: "true"}, False),
    ],
)
def test_only_gateway_only_asks_for_a_policy(annotations: dict[str, str] | None, wanted: bool) -> None:
    assert wants_gateway_only(annotations) is wanted


@pytest.mark.parametrize("text", ["gateway-only", "none"])
def test_admission_accepts_the_two_values(text: str) -> None:
    assert parse_network_policy(text) == text


@pytest.mark.parametrize("text", ["", "true", "gateway", "Gateway-Only"])
def test_admission_refuses_anything_else_naming_the_values(text: str) -> None:
    with pytest.raises(ValueError, match=r'"gateway-only".*"none"'):
        parse_network_policy(text)


@pytest.mark.parametrize("value", ["gateway-only", "none"])
def test_a_playgrounds_annotation_is_copied_to_its_inference_service(value: str) -> None:
    desired = build_service(playground(annotations={ANNOTATION: value}), [llama3_8b()], vllm())
    assert desired["metadata"]["annotations"] == {ANNOTATION: value}
    owned = Service.from_dict({**desired, "metadata": {**desired["metadata"], "uid": "u"}})
    assert wants_gateway_only(owned.metadata.annotations) is (value == "gateway-only")


@pytest.mark.parametrize("validate", [validate_playground_annotations, validate_service_annotations])
def test_admission_names_the_annotation_and_its_values(validate: Any) -> None:
    obj = {"metadata": {"annotations": {ANNOTATION: "yes"}}}
    errors = validate(obj, None)
    assert len(errors) == 1
    assert ANNOTATION in str(errors[0])
    assert "gateway-only" in str(errors[0])
    assert validate({"metadata": {"annotations": {ANNOTATION: "gateway-only"}}}, None) == []
    # An update that leaves a bad stored value as it was is let through (it may be cleaned up or deleted).
    assert validate(obj, obj) == []

"""The InferencePool CRD llmaz ships for clusters without the Gateway API Inference Extension: generated from
`llmaz.apis.gie_v1`, committed current in config/gie and the chart's crds/, outside config/default, and shaped as
the Inference Extension's v1 API."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.apis import resources as r
from llmaz.apis.gie_v1 import InferencePool
from llmaz_dev.crdgen import crds
from llmaz_dev.crdgen.__main__ import main as crdgen_main

REPO = Path(__file__).resolve().parents[3]
GIE = REPO / "config" / "gie"
FILE = "inference.networking.k8s.io_inferencepools.yaml"


@functools.cache
def _crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(crds.rendered_crds(crds.GIE_CRDS)[FILE])
    return crd


def _at(path: str) -> dict[str, Any]:
    node: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_committed_gie_crd_is_regenerated_from_the_model() -> None:
    rendered = crds.rendered_crds(crds.GIE_CRDS)
    committed = {path.name: path.read_text() for path in GIE.glob("*.yaml") if path.name != "kustomization.yaml"}
    assert committed == rendered, "config/gie is out of date with src/llmaz/apis/gie_v1.py: run `make manifests`"


def test_the_chart_ships_the_same_crd() -> None:
    assert (REPO / "chart" / "crds" / FILE).read_text() == crds.rendered_crds(crds.GIE_CRDS)[FILE]


def test_config_gie_installs_the_crd_and_config_default_does_not() -> None:
    kustomization = yaml.safe_load((GIE / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [FILE]
    assert "gie" not in (REPO / "config" / "default" / "kustomization.yaml").read_text()
    assert "gie" not in (REPO / "config" / "crd" / "kustomization.yaml").read_text()


def test_llmaz_crds_and_gie_crds_are_generated_apart(tmp_path: Path) -> None:
    assert crdgen_main(["--gie", str(tmp_path / "gie")]) == 0
    assert crdgen_main([str(tmp_path / "bases")]) == 0
    assert sorted(p.name for p in (tmp_path / "gie").iterdir()) == [FILE]
    assert FILE not in {p.name for p in (tmp_path / "bases").iterdir()}


def test_names_group_version_and_scope_are_the_inference_extensions() -> None:
    crd = _crd()
    assert crd["metadata"]["name"] == "inferencepools.inference.networking.k8s.io"
    assert crd["spec"]["group"] == r.INFERENCE_POOLS.group == "inference.networking.k8s.io"
    assert crd["spec"]["names"]["kind"] == r.INFERENCE_POOLS.kind == "InferencePool"
    assert crd["spec"]["names"]["plural"] == r.INFERENCE_POOLS.plural
    assert crd["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in crd["spec"]["versions"]] == [r.INFERENCE_POOLS.version] == ["v1"]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_a_protected_group_carries_the_api_approval_annotation() -> None:
    # The API server refuses a CRD in a *.k8s.io group without it.
    assert _crd()["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("unapproved")


@pytest.mark.parametrize(
    ("path", "key", "value"),
    [
        ("spec", "required", ["endpointPickerRef", "selector", "targetPorts"]),
        ("spec.selector", "required", ["matchLabels"]),
        ("spec.selector.matchLabels", "additionalProperties", {"type": "string"}),
        ("spec.targetPorts", "minItems", 1),
        ("spec.targetPorts", "maxItems", 8),
        ("spec.targetPorts.[].number", "minimum", 1),
        ("spec.targetPorts.[].number", "maximum", 65535),
        ("spec.appProtocol", "enum", ["http", "kubernetes.io/h2c"]),
        ("spec.appProtocol", "default", "http"),
        ("spec.endpointPickerRef", "required", ["name"]),
        ("spec.endpointPickerRef.kind", "default", "Service"),
        ("spec.endpointPickerRef.group", "default", ""),
        ("spec.endpointPickerRef.failureMode", "enum", ["FailOpen", "FailClose"]),
        ("spec.endpointPickerRef.failureMode", "default", "FailClose"),
        ("spec.endpointPickerRef.port", "required", ["number"]),
    ],
)
def test_the_schema_follows_the_v1_api(path: str, key: str, value: Any) -> None:
    assert _at(path)[key] == value


def test_target_ports_must_be_unique_and_a_service_picker_needs_a_port() -> None:
    ports_rules = [rule["rule"] for rule in _at("spec.targetPorts")["x-kubernetes-validations"]]
    picker_rules = [rule["rule"] for rule in _at("spec.endpointPickerRef")["x-kubernetes-validations"]]
    assert ports_rules == ["self.all(p1, self.exists_one(p2, p1.number == p2.number))"]
    assert picker_rules == ["self.kind != 'Service' || has(self.port)"]


def test_status_parents_is_an_opaque_list_the_gateways_own() -> None:
    parents = _at("status.parents")
    assert parents["type"] == "array"
    assert parents["items"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def test_the_model_round_trips_a_pool_with_gateway_status() -> None:
    pool = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "targetPorts": [{"number": 8080}],
            "endpointPickerRef": {"name": "llmaz-epp", "port": {"number": 9002}, "failureMode": "FailOpen"},
        },
        "status": {"parents": [{"parentRef": {"name": "gw"}, "conditions": [{"type": "Accepted"}]}]},
    }
    assert InferencePool.from_dict(pool).to_dict() == pool


def test_the_model_refuses_more_than_eight_target_ports() -> None:
    spec = {
        "selector": {"matchLabels": {}},
        "targetPorts": [{"number": n} for n in range(8000, 8009)],
        "endpointPickerRef": {"name": "p"},
    }
    with pytest.raises(ValueError, match=r"spec\.targetPorts"):
        InferencePool.from_dict({"metadata": {}, "spec": spec})

"""The generated CRDs: committed files are current, output is deterministic, and llmaz's API contract (groups,
kinds, fields, defaults) holds."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.crdgen import crds

REPO = Path(__file__).resolve().parents[3]
BASES = REPO / "config" / "crd" / "bases"
ROLLOUT_DEFAULT = {
    "type": "RollingUpdate",
    "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
}


@functools.cache
def _rendered() -> dict[str, str]:
    return crds.rendered_crds()


@functools.cache
def _parsed(file_name: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.load(_rendered()[file_name], Loader=yaml.CSafeLoader)
    return crd


def _load(file_name: str) -> dict[str, Any]:
    return _parsed(file_name)


def _schema(file_name: str) -> dict[str, Any]:
    schema: dict[str, Any] = _load(file_name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_committed_crds_are_regenerated_from_the_models() -> None:
    rendered = _rendered()
    committed = {path.name: path.read_text() for path in BASES.glob("*.yaml")}
    stale = sorted(name for name in rendered if committed.get(name) != rendered[name])
    assert not stale, f"CRDs out of date with src/llmaz/apis, run `make manifests`: {stale}"
    assert set(committed) == set(rendered)


def test_generation_is_deterministic() -> None:
    assert crds.rendered_crds() == crds.rendered_crds()


def test_staleness_check_notices_a_changed_field(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmaz.apis.core_v1alpha1 import ModelHub

    before = crds.rendered_crds()["llmaz.io_openmodels.yaml"]
    field = ModelHub.model_fields["revision"]
    monkeypatch.setattr(field, "description", "changed")
    assert crds.rendered_crds()["llmaz.io_openmodels.yaml"] != before


OPENMODELS = "llmaz.io_openmodels.yaml"
PLAYGROUNDS = "inference.llmaz.io_playgrounds.yaml"
SERVICES = "inference.llmaz.io_services.yaml"
BACKENDS = "inference.llmaz.io_backendruntimes.yaml"


@pytest.mark.parametrize(
    ("file_name", "path", "default"),
    [
        (OPENMODELS, "spec.source.modelHub.name", "Huggingface"),
        (OPENMODELS, "spec.source.modelHub.revision", "main"),
        (OPENMODELS, "spec.ownedBy", "llmaz"),
        (PLAYGROUNDS, "spec.replicas", 1),
        (PLAYGROUNDS, "spec.modelClaims.models.[].role", "main"),
        (PLAYGROUNDS, "spec.backendRuntimeConfig.backendName", "vllm"),
        (PLAYGROUNDS, "spec.elasticConfig.minReplicas", 1),
        (SERVICES, "spec.replicas", 1),
        (SERVICES, "spec.modelClaims.models.[].role", "main"),
        (SERVICES, "spec.rolloutStrategy", ROLLOUT_DEFAULT),
        (SERVICES, "spec.rolloutStrategy.type", "RollingUpdate"),
        (SERVICES, "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable", 1),
        (SERVICES, "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge", 0),
        (SERVICES, "spec.workloadTemplate.size", 1),
        (SERVICES, "spec.workloadTemplate.restartPolicy", "RecreateGroupOnPodRestart"),
        (SERVICES, "spec.workloadTemplate.subGroupPolicy.subGroupPolicyType", "LeaderWorker"),
    ],
)
def test_every_crd_default_is_in_the_schema(file_name: str, path: str, default: Any) -> None:
    assert _at(_schema(file_name), path)["default"] == default


@pytest.mark.parametrize(
    ("file_name", "path", "key", "value"),
    [
        (OPENMODELS, "spec.source.modelHub.name", "enum", ["Huggingface", "ModelScope"]),
        (PLAYGROUNDS, "spec.modelClaims.models.[].role", "enum", ["main", "draft"]),
        (
            SERVICES,
            "spec.workloadTemplate.restartPolicy",
            "enum",
            ["Default", "RecreateGroupOnPodRestart", "None"],
        ),
        (OPENMODELS, "spec.inferenceConfig.flavors", "maxItems", 8),
        (PLAYGROUNDS, "spec.modelClaims.models", "minItems", 1),
        (PLAYGROUNDS, "spec.elasticConfig.maxReplicas", "minimum", 1),
        (OPENMODELS, "spec.createdAt", "format", "date-time"),
        (PLAYGROUNDS, "spec.replicas", "format", "int32"),
        (OPENMODELS, "spec", "required", ["familyName", "source"]),
        (OPENMODELS, "spec.inferenceConfig.flavors.[]", "required", ["name"]),
        (PLAYGROUNDS, "spec.elasticConfig", "required", ["maxReplicas"]),
        (PLAYGROUNDS, "status", "required", ["replicas"]),
        (SERVICES, "status", "required", ["replicas"]),
        (SERVICES, "spec", "required", ["workloadTemplate"]),
        (SERVICES, "spec.workloadTemplate", "required", ["workerTemplate"]),
        (BACKENDS, "spec", "required", ["image", "version"]),
        (BACKENDS, "spec.recommendedConfigs.[]", "required", ["name"]),
    ],
)
def test_validation_rules_of_the_contract(file_name: str, path: str, key: str, value: Any) -> None:
    assert _at(_schema(file_name), path)[key] == value


@pytest.mark.parametrize(
    ("file_name", "plural", "scope", "short", "scalable"),
    [
        (OPENMODELS, "openmodels", "Cluster", "om", False),
        (BACKENDS, "backendruntimes", "Cluster", "br", False),
        (PLAYGROUNDS, "playgrounds", "Namespaced", "pl", True),
        (SERVICES, "services", "Namespaced", "isvc", True),
    ],
)
def test_names_scope_and_subresources(file_name: str, plural: str, scope: str, short: str, scalable: bool) -> None:
    crd = _load(file_name)
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["names"]["shortNames"] == [short]
    assert crd["spec"]["scope"] == scope
    assert "conversion" not in crd["spec"]
    subresources = crd["spec"]["versions"][0]["subresources"]
    assert subresources["status"] == {}
    if scalable:
        assert subresources["scale"] == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    else:
        assert "scale" not in subresources


@pytest.mark.parametrize(
    ("file_name", "columns"),
    [
        (OPENMODELS, ["OWNEDBY", "AGE", "MODELHUB", "MODELID", "URI"]),
        (PLAYGROUNDS, ["MODEL", "REPLICAS", "STATUS", "AGE"]),
        (SERVICES, ["NAME", "REPLICAS", "STATUS", "AGE"]),
    ],
)
def test_printer_columns_in_order(file_name: str, columns: list[str]) -> None:
    version = _load(file_name)["spec"]["versions"][0]
    assert [column["name"] for column in version["additionalPrinterColumns"]] == columns


def test_backendruntime_has_no_printer_columns() -> None:
    assert "additionalPrinterColumns" not in _load(BACKENDS)["spec"]["versions"][0]


def test_playground_status_column_reads_the_available_reason() -> None:
    version = _load(PLAYGROUNDS)["spec"]["versions"][0]
    status = next(c for c in version["additionalPrinterColumns"] if c["name"] == "STATUS")
    assert status["jsonPath"] == ".status.conditions[?(@.type=='Available')].reason"


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


@pytest.mark.parametrize("file_name", [OPENMODELS, PLAYGROUNDS, SERVICES, BACKENDS])
def test_schemas_are_structural_without_escape_hatches(file_name: str) -> None:
    for node in _walk(_schema(file_name)):
        assert "x-kubernetes-preserve-unknown-fields" not in node
        assert "$ref" not in node
        assert "x-kubernetes-patch-merge-key" not in node
        if "properties" in node:
            assert node.get("type") == "object"


def test_embedded_pod_templates_keep_list_map_markers_for_server_side_apply() -> None:
    pod = _at(_schema(SERVICES), "spec.workloadTemplate.workerTemplate.spec")
    assert pod["properties"]["containers"]["x-kubernetes-list-type"] == "map"
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert pod["properties"]["initContainers"]["x-kubernetes-list-map-keys"] == ["name"]
    container = pod["properties"]["containers"]["items"]["properties"]
    assert container["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert container["volumeMounts"]["x-kubernetes-list-map-keys"] == ["mountPath"]
    assert container["ports"]["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert pod["properties"]["volumes"]["x-kubernetes-list-map-keys"] == ["name"]


def test_embedded_pod_template_metadata_is_pruned() -> None:
    for template in ("leaderTemplate", "workerTemplate"):
        metadata = _at(_schema(SERVICES), f"spec.workloadTemplate.{template}.metadata")
        assert sorted(metadata["properties"]) == ["annotations", "finalizers", "labels", "name", "namespace"]


def test_embedded_kubernetes_types_are_the_full_upstream_schemas() -> None:
    backend = _schema(BACKENDS)
    assert "httpGet" in _at(backend, "spec.livenessProbe")["properties"]
    assert "preStop" in _at(backend, "spec.lifecycle")["properties"]
    assert "valueFrom" in _at(backend, "spec.envs.[]")["properties"]
    metric = _at(backend, "spec.recommendedConfigs.[].scaleTrigger.hpa.metrics.[]")
    assert set(metric["properties"]) >= {
        "type",
        "resource",
        "pods",
        "object",
        "external",
        "containerResource",
    }
    target = _at(metric, "resource.target.averageValue")
    assert target["x-kubernetes-int-or-string"] is True
    behavior = _at(_schema(PLAYGROUNDS), "spec.elasticConfig.scaleTrigger.hpa.behavior")
    assert set(behavior["properties"]) == {"scaleUp", "scaleDown"}


def test_conditions_use_the_metav1_condition_schema() -> None:
    condition = _at(_schema(PLAYGROUNDS), "status.conditions.[]")
    assert condition["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert condition["properties"]["reason"]["pattern"] == "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    assert condition["properties"]["message"]["maxLength"] == 32768

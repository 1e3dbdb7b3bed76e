"""BackendRuntime: recommended configs need limits >= requests per key and unique names."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import BackendRuntime
from llmaz.webhooks.backendruntime import validate_backendruntime


def backend(*configs: dict[str, Any]) -> BackendRuntime:
    return BackendRuntime.from_dict(
        {
            "apiVersion": "inference.llmaz.io/v1alpha1",
            "kind": "BackendRuntime",
            "metadata": {"name": "vllm"},
            "spec": {"image": "vllm/vllm-openai", "version": "v0.6.0", "recommendedConfigs": list(configs)},
        }
    )


def res(limits: dict[str, Any], requests: dict[str, Any]) -> dict[str, Any]:
    return {"limits": limits, "requests": requests}


CASES: list[tuple[str, list[dict[str, Any]], list[str]]] = [
    ("no configs", [], []),
    ("limits equal requests", [{"name": "default", "resources": res({"cpu": 4}, {"cpu": "4000m"})}], []),
    (
        "limit below request",
        [{"name": "default", "resources": res({"cpu": 2}, {"cpu": 4})}],
        ["spec.resources: Forbidden: resource limit of cpu is less than resource request"],
    ),
    ("units are compared exactly", [{"name": "default", "resources": res({"memory": "1Gi"}, {"memory": "1G"})}], []),
    (
        "binary below decimal",
        [{"name": "d", "resources": res({"memory": "953Mi"}, {"memory": "1G"})}],
        ["spec.resources: Forbidden: resource limit of memory is less than resource request"],
    ),
    ("a key only in limits is not compared", [{"name": "d", "resources": res({"cpu": 1}, {"memory": "8Gi"})}], []),
    ("only limits", [{"name": "d", "resources": {"limits": {"cpu": 1}}}], []),
    (
        "duplicate names",
        [{"name": "default"}, {"name": "x"}, {"name": "default"}],
        ["spec.args.name: Forbidden: duplicated name default"],
    ),
    (
        "resources then names, across configs",
        [{"name": "a", "resources": res({"cpu": 1, "memory": "1Gi"}, {"cpu": 2, "memory": "2Gi"})}, {"name": "a"}],
        [
            "spec.resources: Forbidden: resource limit of cpu is less than resource request",
            "spec.resources: Forbidden: resource limit of memory is less than resource request",
            "spec.args.name: Forbidden: duplicated name a",
        ],
    ),
]


@pytest.mark.parametrize(("case", "configs", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_rule(case: str, configs: list[dict[str, Any]], expected: list[str]) -> None:
    assert [str(e) for e in validate_backendruntime(backend(*configs))] == expected

"""Service: model claim rules (with the fix requiring models and one main model), the model-runner container."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Service
from llmaz.apis.validation import validate_service
from llmaz.apis.validation.names import DNS1035_FORMAT_MESSAGE, LABEL_FORMAT_MESSAGE, serving_name_too_long
from llmaz.webhooks.lookup import StaticLookup
from llmaz.webhooks.service import service_warnings

RUNNER = {"workerTemplate": {"spec": {"containers": [{"name": "model-runner", "image": "vllm"}]}}}


def service(models: list[dict[str, Any]] | None, template: dict[str, Any] = RUNNER, name: str = "qwen") -> Service:
    spec: dict[str, Any] = {"workloadTemplate": template}
    if models is not None:
        spec["modelClaims"] = {"models": models}
    return Service.from_dict(
        {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Service", "metadata": {"name": name}, "spec": spec}
    )


def errors(svc: Service, creating: bool = True) -> list[str]:
    return [str(e) for e in validate_service(svc, creating)]


MODELS = "spec.modelClaims.models"
CASES: list[tuple[str, list[dict[str, Any]] | None, list[str]]] = [
    ("one main model", [{"name": "a"}], []),
    ("main and draft", [{"name": "a", "role": "main"}, {"name": "b", "role": "draft"}], []),
    (
        "speculative with three models",
        [{"name": "a"}, {"name": "b", "role": "draft"}, {"name": "c"}],
        [
            f"{MODELS}: Forbidden: only two models are allowed in speculativeDecoding mode",
            f"{MODELS}: Forbidden: main model is required",
        ],
    ),
    (
        "speculative without a main model",
        [{"name": "a", "role": "draft"}, {"name": "b", "role": "draft"}],
        [f"{MODELS}: Forbidden: main model is required"],
    ),
    # Fix #8: a Service claims at least one model and exactly one main model.
    ("no model claims (fix)", None, [f"{MODELS}: Required value: at least one model is required"]),
    ("empty models (fix)", [], [f"{MODELS}: Required value: at least one model is required"]),
    (
        "two main models without a draft (fix)",
        [{"name": "a"}, {"name": "b", "role": "main"}],
        [f"{MODELS}: Forbidden: only one main model is allowed"],
    ),
]


@pytest.mark.parametrize(("case", "models", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_rule(case: str, models: list[dict[str, Any]] | None, expected: list[str]) -> None:
    assert errors(service(models)) == expected
    assert errors(service(models), creating=False) == expected


CONTAINERS = "spec.workloadTemplate.workerTemplate.spec.containers: Forbidden: model-runner container doesn't exist"


@pytest.mark.parametrize(
    "template",
    [
        {"workerTemplate": {"spec": {"containers": [{"name": "runner", "image": "x"}]}}},
        {"workerTemplate": {"spec": {"containers": []}}},
        {"workerTemplate": {}},
        {"leaderTemplate": RUNNER["workerTemplate"], "workerTemplate": {"spec": {"containers": [{"name": "w"}]}}},
    ],
    ids=["other container", "no containers", "no pod spec", "only the leader has it"],
)
def test_a_worker_template_without_model_runner_is_denied_on_create_only(template: dict[str, Any]) -> None:
    assert errors(service([{"name": "a"}], template)) == [CONTAINERS]
    assert errors(service([{"name": "a"}], template), creating=False) == []


SIZE = "spec.workloadTemplate.size: Invalid value: {}: must be greater than or equal to 1"


@pytest.mark.parametrize(("size", "expected"), [(0, [SIZE.format(0)]), (-1, [SIZE.format(-1)]), (1, []), (4, [])])
def test_a_workload_size_below_one_is_denied_on_create_and_update(size: int, expected: list[str]) -> None:
    # Fix: llmaz admitted it, and the LeaderWorkerSet it became could never run.
    template = {**RUNNER, "size": size}
    assert errors(service([{"name": "a"}], template)) == expected
    assert errors(service([{"name": "a"}], template), creating=False) == expected


def test_the_name_is_checked_on_create_only() -> None:
    svc = service([{"name": "a"}], name="a_b")
    assert errors(svc) == [f'metadata.name: Invalid value: "a_b": {LABEL_FORMAT_MESSAGE}']
    assert errors(svc, creating=False) == []


def test_missing_models_are_named_in_warnings_once_each() -> None:
    svc = service([{"name": "a"}, {"name": "b", "role": "draft"}])
    assert service_warnings(svc, StaticLookup(models={"a"})) == [
        "OpenModel 'b' not found; the workload waits until it exists"
    ]
    assert service_warnings(svc, None) == []


def test_a_claimed_flavor_the_main_model_lacks_is_named_in_a_warning() -> None:
    svc = service([{"name": "a"}])
    assert svc.spec.model_claims is not None
    svc.spec.model_claims.inference_flavors = ["h100", "a10"]
    lookup = StaticLookup(models={"a"}, flavors={"a": ["a100", "a10"]})
    assert service_warnings(svc, lookup) == [
        "OpenModel 'a' has no inference flavor 'h100'; it is skipped (the Service's FlavorsResolved condition says "
        "which flavor is used)"
    ]
    # A model not known yet: only the missing model is named.
    assert service_warnings(svc, StaticLookup()) == ["OpenModel 'a' not found; the workload waits until it exists"]


LEADER = {"spec": {"containers": [{"name": "model-runner", "image": "llama"}]}}


def sized(name: str, multi_host: bool = False, replicas: int | None = None) -> Service:
    svc = service([{"name": "a"}], {**RUNNER, "leaderTemplate": LEADER, "size": 2} if multi_host else RUNNER, name)
    if replicas is not None:
        svc.spec.replicas = replicas
    return svc


class TestNamesMadeFromTheServiceName:
    """Fix: llmaz admitted a name its `-lb` Service or its LeaderWorkerSet's pods could not carry."""

    def test_a_single_host_service_name_may_have_52_characters(self) -> None:
        assert errors(sized("s" * 52)) == []
        assert errors(sized("s" * 53)) == [f'metadata.name: Invalid value: "{"s" * 53}": {serving_name_too_long(52)}']

    def test_a_multi_host_service_name_leaves_room_for_the_group_index_of_its_workers(self) -> None:
        assert errors(sized("s" * 48, multi_host=True)) == []
        assert errors(sized("s" * 49, multi_host=True)) == [
            f'metadata.name: Invalid value: "{"s" * 49}": {serving_name_too_long(48)}'
        ]

    def test_more_than_a_thousand_groups_need_a_shorter_name(self) -> None:
        assert errors(sized("s" * 48, multi_host=True, replicas=1000)) == []
        assert errors(sized("s" * 48, multi_host=True, replicas=1001)) == [
            f'metadata.name: Invalid value: "{"s" * 48}": {serving_name_too_long(47)}'
        ]

    def test_a_name_starting_with_a_digit_is_denied(self) -> None:
        assert errors(sized("1b")) == [f'metadata.name: Invalid value: "1b": {DNS1035_FORMAT_MESSAGE}']
        assert errors(sized("1b"), creating=False) == []


def test_the_reconciler_sizes_a_multi_host_name_for_its_current_groups_only() -> None:
    # Admitted before the limit, with ten groups: its names fit, so the reconciler does not stop it.
    name = "s" * 50
    assert [str(e) for e in validate_service(sized(name, multi_host=True, replicas=10), True, reconciling=True)] == []
    assert [str(e) for e in validate_service(sized(name, multi_host=True, replicas=11), True, reconciling=True)] == [
        f'metadata.name: Invalid value: "{name}": {serving_name_too_long(49)}'
    ]

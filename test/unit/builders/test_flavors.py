"""Inference flavors in the pod templates: the order they are tried in, and node affinity for the active one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmaz.apis.inference_v1alpha1 import ServiceStatus
from llmaz.controllers.builders import build_leader_worker_set
from llmaz.controllers.builders.flavors import flavor_order, missing_flavors, with_node_selector
from llmaz.controllers.builders.status import service_status, with_flavor

from .factories import LOADER_IMAGE, hub_model, only_runner, single_host_service, worker

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100"}
A10 = {"nvidia.com/gpu.product": "NVIDIA-A10"}
FLAVORS = [
    {"name": "a100", "limits": {"nvidia.com/gpu": 8}, "nodeSelector": A100},
    {"name": "a10", "limits": {"nvidia.com/gpu": 2}, "nodeSelector": A10},
    {"name": "t4", "limits": {"nvidia.com/gpu": 1}},
]
MODEL = hub_model("m", "a/b", flavors=FLAVORS)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _in(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": [value]}


def _required(template: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


@pytest.mark.parametrize(
    ("claimed", "order", "missing"),
    [
        (None, ["a100", "a10", "t4"], []),
        ([], ["a100", "a10", "t4"], []),
        (["a10"], ["a10"], []),
        (["t4", "a100"], ["t4", "a100"], []),
        (["h100", "a10"], ["a10"], ["h100"]),
        (["h100"], [], ["h100"]),
        (["a10", "a10"], ["a10"], []),
    ],
)
def test_the_order_is_the_claimed_flavors_the_model_defines_else_the_models(
    claimed: list[str] | None, order: list[str], missing: list[str]
) -> None:
    assert flavor_order(MODEL, claimed) == order
    assert missing_flavors(MODEL, claimed) == missing


@pytest.mark.parametrize(
    ("spec", "selector", "terms"),
    [
        ({}, A10, [{"matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A10")]}]),
        (
            {},
            {"zone": "b", "gpu": "x"},
            [{"matchExpressions": [_in("gpu", "x"), _in("zone", "b")]}],
        ),
        (
            # Each user term (ORed) gets the flavor's expressions ANDed in, matchFields kept.
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [_in("zone", "a")]},
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                            ]
                        }
                    }
                }
            },
            A10,
            [
                {"matchExpressions": [_in("zone", "a"), _in("nvidia.com/gpu.product", "NVIDIA-A10")]},
                {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                    "matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A10")],
                },
            ],
        ),
        (
            # Already there: not repeated.
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A10")]}]
                        }
                    }
                }
            },
            A10,
            [{"matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A10")]}],
        ),
    ],
    ids=["none", "sorted keys", "anded into each term", "no duplicate"],
)
def test_a_node_selector_becomes_required_node_affinity(
    spec: dict[str, Any], selector: dict[str, str], terms: list[dict[str, Any]]
) -> None:
    template: dict[str, Any] = {"spec": {**spec, "nodeSelector": {"user": "x"}}}
    with_node_selector(template, selector)
    assert _required(template) == terms
    assert template["spec"]["nodeSelector"] == {"user": "x"}


def test_preferred_affinity_is_kept_and_no_selector_changes_nothing() -> None:
    preferred = [{"weight": 1, "preference": {"matchExpressions": [_in("zone", "a")]}}]
    template: dict[str, Any] = {
        "spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}}
    }
    with_node_selector(template, None)
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in template["spec"]["affinity"]["nodeAffinity"]
    with_node_selector(template, A100)
    assert template["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert _required(template) == [{"matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A100")]}]


@pytest.mark.parametrize(
    ("active", "gpus", "product"),
    [(None, "8", "NVIDIA-A100"), ("a100", "8", "NVIDIA-A100"), ("a10", "2", "NVIDIA-A10"), ("t4", "1", None)],
)
def test_pods_are_rendered_for_the_active_flavor(active: str | None, gpus: str, product: str | None) -> None:
    template = worker(build_leader_worker_set(single_host_service(), [MODEL], LOADER_IMAGE, active))
    resources = only_runner(template)["resources"]
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": gpus}
    if product is None:
        assert "affinity" not in template["spec"]
    else:
        assert _required(template) == [{"matchExpressions": [_in("nvidia.com/gpu.product", product)]}]


def test_leader_and_workers_of_a_multi_host_group_get_the_same_flavor() -> None:
    template = {"spec": {"containers": [{"name": "model-runner", "image": "e"}]}}
    svc = single_host_service(
        claims={"inferenceFlavors": ["a100", "a10"]},
        workloadTemplate={"size": 2, "leaderTemplate": template, "workerTemplate": template},
    )
    spec = build_leader_worker_set(svc, [MODEL], LOADER_IMAGE, "a10")["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert _required(spec[role]) == [{"matchExpressions": [_in("nvidia.com/gpu.product", "NVIDIA-A10")]}]
        assert only_runner(spec[role])["resources"]["limits"] == {"nvidia.com/gpu": "2"}
        # The annotation stays as llmaz writes it: the claimed list, not the active flavor.
        assert spec[role]["metadata"]["annotations"] == {"llmaz.io/inference-service-flavors": "a100,a10"}


def test_the_status_records_the_active_flavor_and_a_missing_claim() -> None:
    svc = single_host_service(claims={"inferenceFlavors": ["h100", "a10"]})
    status = with_flavor(svc, service_status(svc, None, T0), "a10", False, ["h100"], "m", T0)
    assert (status["activeFlavor"], status["activeFlavorTime"]) == ("a10", "2024-01-01T00:00:00Z")
    resolved = next(c for c in status["conditions"] if c["type"] == "FlavorsResolved")
    assert (resolved["status"], resolved["reason"], resolved["message"]) == (
        "False",
        "FlavorNotFound",
        "OpenModel m defines no inference flavor h100; using a10",
    )
    # Unchanged flavor: the time stays; the claim fixed: the condition turns True.
    later = T0 + timedelta(minutes=5)
    svc.status = ServiceStatus.from_dict(status)
    again = with_flavor(svc, service_status(svc, None, later), "a10", False, [], "m", later)
    assert again["activeFlavorTime"] == "2024-01-01T00:00:00Z"
    resolved = next(c for c in again["conditions"] if c["type"] == "FlavorsResolved")
    assert (resolved["status"], resolved["reason"]) == ("True", "FlavorsFound")


def test_no_flavor_condition_is_written_when_every_claim_is_found() -> None:
    svc = single_host_service()
    status = with_flavor(svc, service_status(svc, None, T0), None, False, [], "m", T0)
    assert "activeFlavor" not in status
    assert [c["type"] for c in status["conditions"]] == ["Progressing"]

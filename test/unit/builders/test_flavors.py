"""Inference flavors: the order they are tried in, node affinity for the active one, and when to move on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmaz.apis import Flavor
from llmaz.apis.inference_v1alpha1 import ServiceStatus
from llmaz.controllers.builders import build_leader_worker_set
from llmaz.controllers.builders.flavors import (
    FlavorDecision,
    Room,
    Waiting,
    blocks_on_fit,
    decide_flavor,
    fallback_message,
    flavor_order,
    missing_flavors,
    pods_per_service,
    return_candidates,
    room_on,
    template_tolerations,
    with_node_selector,
)
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
INSUFFICIENT = (
    "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector."
)
NO_MATCH = "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector. preemption: 0/6 nodes ..."
NO_PVC = "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/6 nodes ..."


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


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        (INSUFFICIENT, True),
        (NO_MATCH, True),
        ("0/2 nodes are available: 2 Insufficient cpu.", True),
        (NO_PVC, False),
        ("0/6 nodes are available: 6 node(s) had volume node affinity conflict.", False),
        ("0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) had volume node affinity conflict.", False),
        ("0/6 nodes are available: 6 node(s) had untolerated taint {gpu: true}.", False),
        ("", False),
    ],
)
def test_only_a_lack_of_fitting_nodes_counts(message: str, counts: bool) -> None:
    assert blocks_on_fit(message) is counts


def _pod(
    name: str,
    since: datetime | None,
    message: str = INSUFFICIENT,
    reason: str = "Unschedulable",
    status: str = "False",
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    condition: dict[str, Any] = {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
    if since is not None:
        condition["lastTransitionTime"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": metadata, "status": {"conditions": [condition]}}


ORDER = ["a100", "a10"]


@pytest.mark.parametrize(
    ("current", "since", "pods", "elapsed", "expected"),
    [
        # No flavors: nothing to render.
        (None, None, [], 500, FlavorDecision(None)),
        # Starts at the first; nothing waiting.
        (None, None, [], 500, None),
        # Waiting 20 s of 60: stay, look again in 40 s.
        ("a100", None, [_pod("p", T0)], 20, ("a100", None, False, 40.0)),
        # A full period: move to the next.
        ("a100", None, [_pod("p", T0)], 60, ("a10", "a100", False, 60.0)),
        # The longest waiting pod decides.
        ("a100", None, [_pod("q", T0 + timedelta(seconds=50)), _pod("p", T0)], 61, ("a10", "a100", False, 60.0)),
        # Waits count from the last change at the earliest: at most one change per period.
        ("a10", T0 + timedelta(seconds=30), [_pod("p", T0)], 60, ("a10", None, False, 30.0)),
        ("a10", T0 + timedelta(seconds=30), [_pod("p", T0)], 90, ("a10", None, True, None)),
        # Other reasons do not count: scheduled pods, a missing claim, a pod being deleted, no transition time.
        ("a100", None, [_pod("p", T0, status="True", reason="")], 600, ("a100", None, False, None)),
        ("a100", None, [_pod("p", T0, message=NO_PVC)], 600, ("a100", None, False, None)),
        ("a100", None, [_pod("p", T0, reason="SchedulingGated")], 600, ("a100", None, False, None)),
        ("a100", None, [_pod("p", T0, deleting=True)], 600, ("a100", None, False, None)),
        ("a100", None, [_pod("p", None)], 600, ("a100", None, False, None)),
        # A recorded flavor no longer in the order starts over at the first.
        ("h100", T0 + timedelta(seconds=500), [_pod("p", T0)], 30, ("a100", None, False, 30.0)),
    ],
)
def test_the_fallback_decision(
    current: str | None,
    since: datetime | None,
    pods: list[dict[str, Any]],
    elapsed: float,
    expected: FlavorDecision | tuple[str, str | None, bool, float | None] | None,
) -> None:
    order = [] if isinstance(expected, FlavorDecision) else ORDER
    decision = decide_flavor(order, current, since, pods, T0 + timedelta(seconds=elapsed), 60)
    if isinstance(expected, FlavorDecision):
        assert decision == expected
    elif expected is None:
        assert (decision.active, decision.changed, decision.requeue_after) == ("a100", False, None)
    else:
        assert (decision.active, decision.previous, decision.exhausted, decision.requeue_after) == expected


def test_a_zero_period_disables_fallback() -> None:
    decision = decide_flavor(ORDER, "a100", None, [_pod("p", T0)], T0 + timedelta(hours=5), 0)
    assert (decision.active, decision.changed, decision.exhausted, decision.requeue_after) == (
        "a100",
        False,
        False,
        None,
    )
    assert decision.waiting == Waiting("p", T0, INSUFFICIENT)


def test_the_event_names_both_flavors_the_wait_and_the_reason() -> None:
    decision = decide_flavor(ORDER, "a100", None, [_pod("p-0", T0)], T0 + timedelta(seconds=75), 60)
    assert fallback_message(decision, T0 + timedelta(seconds=75)) == (
        f"Moved from flavor a100 to a10: pod p-0 was unschedulable for 1m15s: {INSUFFICIENT}"
    )


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


FOUR_GPUS = Flavor.from_dict({"name": "a100", "limits": {"nvidia.com/gpu": "4"}, "nodeSelector": {"gpu": "a100"}})
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, gpus: str = "8", **spec: Any) -> dict[str, Any]:
    ready = spec.pop("ready", "True")
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus, "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def bound(gpus: str, phase: str = "Running", init_gpus: str | None = None, requests: bool = False) -> dict[str, Any]:
    amount = {"nvidia.com/gpu": gpus}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests" if requests else "limits": amount}}]}
    if init_gpus is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}]
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("nodes", "pods", "tolerations", "room"),
    [
        ([node("n")], {}, [], Room(2, 1)),
        ([node("n"), node("m", "4")], {}, [], Room(3, 2)),
        ([node("n")], {"n": [bound("4")]}, [], Room(1, 1)),
        ([node("n")], {"n": [bound("4", requests=True), bound("2")]}, [], Room(0, 0)),
        ([node("n")], {"n": [bound("8", phase="Succeeded"), bound("8", phase="Failed")]}, [], Room(2, 1)),
        ([node("n")], {"n": [bound("1", init_gpus="6")]}, [], Room(0, 0)),  # the init container's 6 count
        ([node("n", unschedulable=True)], {}, [], Room(0, 0)),
        ([node("n", ready="False")], {}, [], Room(0, 0)),
        ([node("n", taints=[GPU_TAINT])], {}, [], Room(0, 0)),
        ([node("n", taints=[GPU_TAINT])], {}, [{"key": "nvidia.com/gpu", "operator": "Exists"}], Room(2, 1)),
        ([node("n", taints=[GPU_TAINT])], {}, [{"operator": "Exists"}], Room(2, 1)),
        ([node("n", taints=[GPU_TAINT])], {}, [{"key": "nvidia.com/gpu", "value": "other"}], Room(0, 0)),
        (
            [node("n", taints=[GPU_TAINT])],
            {},
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}],
            Room(0, 0),
        ),
        ([node("n", taints=[{**GPU_TAINT, "effect": "PreferNoSchedule"}])], {}, [], Room(2, 1)),
        ([node("n", "0")], {}, [], Room(0, 0)),
    ],
    ids=[
        "empty",
        "two-nodes",
        "half-used",
        "requests-and-limits",
        "ended-pods",
        "init",
        "cordoned",
        "not-ready",
        "tainted",
        "tolerated",
        "tolerate-all",
        "wrong-value",
        "wrong-effect",
        "soft-taint",
        "no-gpus",
    ],
)
def test_room_counts_the_pods_a_flavor_s_nodes_can_take_now(
    nodes: list[dict[str, Any]], pods: dict[str, list[dict[str, Any]]], tolerations: list[dict[str, Any]], room: Room
) -> None:
    assert room_on(FOUR_GPUS, nodes, pods, tolerations) == room


def test_room_also_counts_the_node_s_pod_capacity() -> None:
    full = node("n")
    full["status"]["allocatable"]["pods"] = "1"
    assert room_on(FOUR_GPUS, [full], {"n": [bound("0")]}, []) == Room(0, 0)
    assert room_on(Flavor.from_dict({"name": "cpu"}), [node("n")], {}, []) == Room(
        110, 1
    )  # no limits: the pod count bounds it


@pytest.mark.parametrize(
    ("active", "since", "after", "due"),
    [
        ("a10", 60, 60.0, (["a100", "h100"], 60.0)),
        ("a10", 45, 60.0, ([], 15.0)),  # 15 s of the period left
        ("h100", 60, 60.0, (["a100"], 60.0)),
        ("a100", 600, 60.0, ([], None)),  # the first flavor
        ("a10", 600, 0.0, ([], None)),  # fallback off
        ("a10", None, 60.0, ([], None)),  # no record of when it began
        ("t4", 600, 60.0, ([], None)),  # not in the order
    ],
)
def test_a_return_is_due_one_full_period_after_the_last_change(
    active: str, since: int | None, after: float, due: tuple[list[str], float | None]
) -> None:
    began = None if since is None else T0 - timedelta(seconds=since)
    assert return_candidates(["a100", "h100", "a10"], active, began, T0, after) == due


def test_a_service_s_pods_and_the_tolerations_all_of_them_have() -> None:
    gpu, spot = {"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "spot", "operator": "Exists"}
    single = single_host_service(replicas=3)
    single.spec.workload_template["workerTemplate"]["spec"]["tolerations"] = [gpu, spot]
    assert (pods_per_service(single), template_tolerations(single)) == (3, [gpu, spot])
    multi = single_host_service(replicas=2)
    template = multi.spec.workload_template
    template["size"] = 4
    template["workerTemplate"]["spec"]["tolerations"] = [gpu, spot]
    template["leaderTemplate"] = {"spec": {"containers": [], "tolerations": [gpu]}}
    assert (pods_per_service(multi), template_tolerations(multi)) == (8, [gpu])

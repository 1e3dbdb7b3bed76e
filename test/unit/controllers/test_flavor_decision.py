"""The flavor decision: when pods waiting for a node move a Service to its next flavor, when a return to a better
one is due, and what the Events say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmaz.controllers.flavors.decision import (
    FlavorDecision,
    Waiting,
    blocks_on_fit,
    decide_flavor,
    fallback_message,
    pods_per_service,
    return_candidates,
    template_tolerations,
)

from ..builders.factories import single_host_service

T0 = datetime(2024, 1, 1, tzinfo=UTC)
INSUFFICIENT = (
    "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector."
)
NO_MATCH = "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector. preemption: 0/6 nodes ..."
NO_PVC = "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/6 nodes ..."


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

"""The fit: what a pod takes from its node as kube-scheduler counts it, and how many more pods a flavor's nodes
can take."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Flavor
from llmaz.apis.quantity import parse_quantity
from llmaz.controllers.flavors.decision import flavor_request
from llmaz.controllers.flavors.fit import Room, pod_requests, room_on, schedulable

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
    assert room_on(flavor_request(FOUR_GPUS), nodes, pods, tolerations) == room


def test_room_also_counts_the_node_s_pod_capacity() -> None:
    full = node("n")
    full["status"]["allocatable"]["pods"] = "1"
    assert room_on(flavor_request(FOUR_GPUS), [full], {"n": [bound("0")]}, []) == Room(0, 0)
    assert room_on(flavor_request(Flavor.from_dict({"name": "cpu"})), [node("n")], {}, []) == Room(
        110, 1
    )  # no limits: the pod count bounds it


GPU = "nvidia.com/gpu"


def _container(name: str, requests: dict[str, str], restart: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart is not None:
        container["restartPolicy"] = restart
    return container


def _sidecar(name: str, requests: dict[str, str]) -> dict[str, Any]:
    return _container(name, requests, "Always")


def _spec(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init or [], **more}}


@pytest.mark.parametrize(
    ("pod", "requests"),
    [
        (_spec([_container("a", {"cpu": "1"}), _container("b", {"cpu": "500m"})]), {"cpu": "1.5"}),
        (_spec([{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]), {"cpu": "2", "memory": "1Gi"}),
        (_spec([{"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}}]), {"cpu": "1"}),
        (_spec([_container("a", {"cpu": "1"})], [_container("i", {"cpu": "4"})]), {"cpu": "4"}),
        (_spec([_container("a", {GPU: "1"})], [_sidecar("s", {GPU: "1"})]), {"nvidia.com/gpu": "2"}),
        # An init container after a sidecar runs beside it: max(1 + 1, 3 + 1).
        (
            _spec([_container("a", {"cpu": "1"})], [_sidecar("s", {"cpu": "1"}), _container("i", {"cpu": "3"})]),
            {"cpu": "4"},
        ),
        # One before it does not: max(1 + 1, 3).
        (
            _spec([_container("a", {"cpu": "1"})], [_container("i", {"cpu": "3"}), _sidecar("s", {"cpu": "1"})]),
            {"cpu": "3"},
        ),
        (
            _spec(
                [_container("a", {"cpu": "500m"})],
                [_sidecar("s1", {"cpu": "1"}), _sidecar("s2", {"cpu": "1"}), _container("i", {"cpu": "1"})],
            ),
            {"cpu": "3"},
        ),
        (
            _spec([_container("a", {"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"}),
            {"cpu": "1.25", "memory": "120Mi"},
        ),
        (_spec([_container("a", {"cpu": "1"})], [_container("i", {"cpu": "4"})], overhead={"cpu": "1"}), {"cpu": "5"}),
        (
            _spec([_container("a", {"cpu": "1", GPU: "1"})], resources={"requests": {"cpu": "3", "memory": "2Gi"}}),
            {"cpu": "3", "memory": "2Gi", "nvidia.com/gpu": "1"},
        ),
        ({"spec": {}}, {}),
    ],
    ids=[
        "containers-add-up",
        "limits-stand-in",
        "requests-over-limits",
        "init-peak",
        "sidecar-beside-containers",
        "init-after-sidecar",
        "init-before-sidecar",
        "sidecars-accumulate",
        "overhead",
        "overhead-over-init-peak",
        "pod-level",
        "empty",
    ],
)
def test_a_pod_takes_what_kube_scheduler_counts(pod: dict[str, Any], requests: dict[str, str]) -> None:
    assert pod_requests(pod) == {name: parse_quantity(value) for name, value in requests.items()}


def _cpu_node(name: str, cpu: str, **extra: Any) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": "64Gi", "pods": "110", **extra}
    return {"metadata": {"name": name}, "spec": {}, "status": {"allocatable": allocatable, "conditions": [READY]}}


def _bound(phase: str = "Running", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": "n", **spec}, "status": {"phase": phase}}


READY = {"type": "Ready", "status": "True"}
TWO_CPUS = {"cpu": parse_quantity("2")}
ONE_GPU = {"nvidia.com/gpu": parse_quantity("1"), "cpu": parse_quantity("0")}


@pytest.mark.parametrize(
    ("request_", "node", "bound", "room"),
    [
        (TWO_CPUS, _cpu_node("n", "4"), [], Room(2, 1)),
        (TWO_CPUS, _cpu_node("n", "4"), [_bound(containers=[_container("c", {"cpu": "1"})])], Room(1, 1)),
        # The pod's overhead is taken from the node too.
        (
            TWO_CPUS,
            _cpu_node("n", "4"),
            [_bound(containers=[_container("c", {"cpu": "1"})], overhead={"cpu": "1500m"})],
            Room(0, 0),
        ),
        # A sidecar runs beside the containers: 1 + 2 of 4 taken, not max(1, 2).
        (
            TWO_CPUS,
            _cpu_node("n", "4"),
            [_bound(containers=[_container("c", {"cpu": "1"})], initContainers=[_sidecar("s", {"cpu": "2"})])],
            Room(0, 0),
        ),
        # A regular init container has ended by the time the containers run: max(1, 2).
        (
            TWO_CPUS,
            _cpu_node("n", "4"),
            [_bound(containers=[_container("c", {"cpu": "1"})], initContainers=[_container("i", {"cpu": "2"})])],
            Room(1, 1),
        ),
        # Pods that have ended hold nothing; pending or unknown ones still do.
        (TWO_CPUS, _cpu_node("n", "4"), [_bound("Succeeded", containers=[_container("c", {"cpu": "4"})])], Room(2, 1)),
        (TWO_CPUS, _cpu_node("n", "4"), [_bound("Failed", containers=[_container("c", {"cpu": "4"})])], Room(2, 1)),
        (TWO_CPUS, _cpu_node("n", "4"), [_bound("Pending", containers=[_container("c", {"cpu": "4"})])], Room(0, 0)),
        (TWO_CPUS, _cpu_node("n", "4"), [_bound("Unknown", containers=[_container("c", {"cpu": "3"})])], Room(0, 0)),
        # Extended resources: counted like any other; a node without any has none free; a zero request is not checked.
        (ONE_GPU, _cpu_node("n", "4", **{GPU: "2"}), [], Room(2, 1)),
        (
            ONE_GPU,
            _cpu_node("n", "4", **{GPU: "2"}),
            [_bound(containers=[_container("c", {GPU: "1"})], initContainers=[_sidecar("s", {GPU: "1"})])],
            Room(0, 0),
        ),
        (ONE_GPU, _cpu_node("n", "4"), [], Room(0, 0)),
        # An overcommitted node has no room, whatever is asked.
        (TWO_CPUS, _cpu_node("n", "1"), [_bound(containers=[_container("c", {"cpu": "3"})])], Room(0, 0)),
    ],
    ids=[
        "empty",
        "one-cpu-taken",
        "overhead",
        "sidecar",
        "init",
        "succeeded",
        "failed",
        "pending",
        "unknown",
        "gpus",
        "gpus-sidecar",
        "no-gpus",
        "overcommitted",
    ],
)
def test_a_node_s_room_subtracts_what_its_bound_pods_take(
    request_: dict[str, Any], node: dict[str, Any], bound: list[dict[str, Any]], room: Room
) -> None:
    assert room_on(request_, [node], {"n": bound}, []) == room


NO_VALUE_TAINT = {"key": "dedicated", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("spec", "conditions", "tolerations", "takes_pods"),
    [
        ({}, [READY], [], True),
        ({"unschedulable": True}, [READY], [{"operator": "Exists"}], False),
        ({}, [], [], False),
        ({}, [{"type": "Ready", "status": "Unknown"}], [], False),
        ({"taints": [NO_VALUE_TAINT]}, [READY], [], False),
        ({"taints": [NO_VALUE_TAINT]}, [READY], [{"key": "dedicated", "operator": "Equal"}], True),
        ({"taints": [NO_VALUE_TAINT]}, [READY], [{"key": "dedicated", "effect": "NoExecute"}], False),
        ({"taints": [{**NO_VALUE_TAINT, "effect": "NoExecute"}]}, [READY], [], False),
        ({"taints": [{**NO_VALUE_TAINT, "effect": "PreferNoSchedule"}]}, [READY], [], True),
    ],
    ids=[
        "ready",
        "cordoned",
        "no-ready-condition",
        "ready-unknown",
        "tainted",
        "tolerated-without-value",
        "other-effect-tolerated",
        "no-execute",
        "soft-taint",
    ],
)
def test_only_ready_uncordoned_nodes_without_untolerated_taints_take_pods(
    spec: dict[str, Any], conditions: list[dict[str, str]], tolerations: list[dict[str, str]], takes_pods: bool
) -> None:
    node = {
        "metadata": {"name": "n"},
        "spec": spec,
        "status": {"allocatable": {"cpu": "4", "pods": "110"}, "conditions": conditions},
    }
    assert schedulable(node, tolerations) is takes_pods
    assert room_on(TWO_CPUS, [node], {}, tolerations) == (Room(2, 1) if takes_pods else Room(0, 0))

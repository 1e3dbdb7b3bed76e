"""Whether pods fit on nodes: kube-scheduler's resource fit (NodeResourcesFit) over a node's allocatable and the pods
bound to it, and the node checks that come before it.

What a pod takes from its node (`pod_requests`), per resource, as kube-scheduler counts it:

    max(sum of the containers + sum of the sidecars,
        max over each other init container i of (i + the sidecars started before it))
    + the pod's overhead

A sidecar is an init container with `restartPolicy: Always`: it starts in init order and then runs beside the
containers. Pod-level requests (`spec.resources`) replace the containers' sum for cpu and memory, the resources
they may name. A limit stands in for a missing request, as the API server defaults it.

A node's free capacity is its allocatable minus the requests of the pods bound to it that have not ended
(`Succeeded` and `Failed` pods hold nothing), and its pod count against its allocatable `pods`. A pod fits when,
for every resource it requests more than zero of and for one pod slot, what is free covers it. Before the fit, a
node must be Ready, not cordoned, and carry no `NoSchedule` or `NoExecute` taint the pods do not tolerate.

Pure: nodes and pods are arguments. What kube-scheduler also weighs and this does not is listed in docs/flavors.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from llmaz.apis.quantity import parse_quantity

Resources = dict[str, Decimal]

PODS = "pods"
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
SIDECAR_RESTART_POLICY = "Always"
# The resources a pod-level `spec.resources` may name (kube-scheduler's supported pod-level resources).
POD_LEVEL_RESOURCES = ("cpu", "memory")
_BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def _requests(resources: Mapping[str, Any] | None) -> Resources:
    """The requests of a `resources` block, a limit standing in for each missing request."""
    resources = resources or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def _add(total: Resources, more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _raise_to(total: Resources, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, Decimal(0)), value)


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What `pod` takes from its node, per resource (see the module docstring)."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add(total, _requests(container.get("resources")))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or ():
        own = _requests(container.get("resources"))
        if container.get("restartPolicy") == SIDECAR_RESTART_POLICY:
            # Runs from its start to the pod's end: beside every later init container and the containers.
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        _raise_to(init_peak, running)
    _raise_to(total, init_peak)
    pod_level = _requests(spec.get("resources"))
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            total[name] = pod_level[name]
    _add(total, {name: parse_quantity(value) for name, value in (spec.get("overhead") or {}).items()})
    return total


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    """The status condition of type `type_` of a node or pod, or an empty mapping."""
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return next((cond for cond in conditions if cond.get("type") == type_), {})


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of `tolerations` matches `taint` (its effect, key and, for `Equal`, value)."""
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def schedulable(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint left untolerated."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if condition(node, "Ready").get("status") != "True":
        return False
    taints = [t for t in spec.get("taints") or () if t.get("effect") in _BLOCKING_TAINT_EFFECTS]
    return all(tolerates(tolerations, taint) for taint in taints)


def free_on(node: Mapping[str, Any], bound: Iterable[Mapping[str, Any]]) -> Resources:
    """The node's allocatable minus what the pods bound to it and not ended take, pod slots included (may go
    below zero where a node is overcommitted)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    free = {name: parse_quantity(value) for name, value in allocatable.items()}
    free.setdefault(PODS, Decimal(0))
    for pod in bound:
        if (pod.get("status") or {}).get("phase") in ENDED_PHASES:
            continue
        free[PODS] -= 1
        for name, value in pod_requests(pod).items():
            free[name] = free.get(name, Decimal(0)) - value
    return free


def copies_that_fit(request: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> int:
    """How many pods, each requesting `request` (plus a pod slot), fit in `free`. A resource requested at zero
    is not checked; one the node lacks has nothing free."""
    counted = {name: value for name, value in request.items() if value > 0 and name != PODS}
    counted[PODS] = Decimal(1)
    return max(0, min(int(free.get(name, Decimal(0)) // amount) for name, amount in counted.items()))


@dataclass(frozen=True, slots=True)
class Room:
    """How many more pods its nodes can take now, and how many of the nodes could take one."""

    pods: int
    nodes: int


def room_on(
    request: Mapping[str, Decimal],
    nodes: Iterable[Mapping[str, Any]],
    pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
    tolerations: Sequence[Mapping[str, Any]],
) -> Room:
    """How many pods requesting `request`, with `tolerations`, the schedulable ones of `nodes` can take now."""
    pods = nodes_with_room = 0
    for node in nodes:
        if not schedulable(node, tolerations):
            continue
        name = str((node.get("metadata") or {}).get("name") or "")
        fits = copies_that_fit(request, free_on(node, pods_by_node.get(name, ())))
        if fits > 0:
            pods += fits
            nodes_with_room += 1
    return Room(pods, nodes_with_room)

"""Which inference flavor a Service runs on now, when to move to the next or back to a better one, and what to say
about it.

The Service controller renders its pods for ONE active flavor at a time (`builders.flavors` shapes the templates).
The order is the claimed list (flavors the model lacks are skipped), else the model's list; an active flavor no
longer in the order starts over at its first entry.

Invariants:
- Pure: pods, room and times are arguments, nothing is remembered between calls. The time a pod has been waiting
  is read from its `PodScheduled` condition's `lastTransitionTime`, counted from no earlier than the moment the
  active flavor last changed (`status.activeFlavorTime`), so there is at most one change per fallback period.
- Only pods the scheduler could not place for lack of a fitting node count (`blocks_on_fit`): a message naming
  `Insufficient <resource>` or a node affinity/selector mismatch, and nothing about volumes or claims. A pod
  waiting for a PersistentVolumeClaim would wait on every flavor: moving would not help.
- With `flavor-return-when-fits`, a Service off its first flavor for a full period moves back to the best
  flavor ahead of it whose nodes have room for all its pods now (`return_if_room`); the room is the caller's
  answer (`fit.room_on` over the nodes and the pods bound to them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from llmaz.apis import Flavor, OpenModel, Service
from llmaz.apis import constants as c
from llmaz.apis.quantity import parse_quantity
from llmaz.controllers.builders.diagnosis import REASON_UNSCHEDULABLE, PodFinding, one_line
from llmaz.controllers.builders.flavors import find_flavor, flavor_order
from llmaz.controllers.flavors.fit import Resources, Room, condition
from llmaz.runtime.timestamp import parse_timestamp

# The scheduler's texts (kube-scheduler's NodeResourcesFit and NodeAffinity plugins) that mean "no node of the
# right kind has room": only these move a Service to its next flavor.
_FIT_REASONS = re.compile(r"Insufficient \S+|didn't match Pod's node affinity/selector")
# Texts that mean the pod would wait on any flavor (VolumeBinding, VolumeZone, VolumeRestrictions, ...).
_NOT_FLAVOR_REASONS = re.compile(r"PersistentVolumeClaim|volume", re.IGNORECASE)
UNSCHEDULABLE = "Unschedulable"


def blocks_on_fit(message: str) -> bool:
    """Whether a scheduler message says no node fits the pod's resources or flavor labels, and nothing else
    that another flavor could not change (volumes, PersistentVolumeClaims)."""
    return bool(_FIT_REASONS.search(message)) and not _NOT_FLAVOR_REASONS.search(message)


@dataclass(frozen=True, slots=True)
class Waiting:
    """The pod that has waited longest for a node of the active flavor, since when, and the scheduler's text."""

    pod: str
    since: datetime
    message: str


def longest_waiting(pods: Iterable[Mapping[str, Any]], not_before: datetime | None) -> Waiting | None:
    """Among pods unschedulable for lack of a fitting node, the one waiting longest (ties: by name).

    A pod's wait starts at its `PodScheduled=False` transition, or at `not_before` if that is later."""
    found: Waiting | None = None
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        scheduled = condition(pod, "PodScheduled")
        if scheduled.get("status") != "False" or scheduled.get("reason") != UNSCHEDULABLE:
            continue
        message = str(scheduled.get("message") or "")
        since = parse_timestamp(scheduled.get("lastTransitionTime"))
        if since is None or not blocks_on_fit(message):
            continue
        if not_before is not None and not_before > since:
            since = not_before
        candidate = Waiting(str(metadata.get("name") or ""), since, message)
        if found is None or (candidate.since, candidate.pod) < (found.since, found.pod):
            found = candidate
    return found


@dataclass(frozen=True, slots=True)
class FlavorDecision:
    """What to render and what to say about it.

    - `active`: the flavor to render (None: the model has none, render no flavor).
    - `previous`: set when this decision moves away from it (record an Event, stamp the time).
    - `waiting`: the pod that has waited longest on the active flavor, if any.
    - `exhausted`: the active flavor is the last one and its pods waited a full period: no flavor fits.
    - `requeue_after`: seconds until the next decision is due, when one is.
    - `room`: set when this decision returns to a higher-priority flavor: the room its nodes have.
    """

    active: str | None
    previous: str | None = None
    waiting: Waiting | None = None
    exhausted: bool = False
    requeue_after: float | None = None
    room: Room | None = None

    @property
    def changed(self) -> bool:
        return self.previous is not None


def decide_flavor(
    order: Sequence[str],
    current: str | None,
    current_since: datetime | None,
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    fallback_after: float,
) -> FlavorDecision:
    """The flavor to run on now, given the recorded one (`status.activeFlavor`, since `current_since`).

    Moves to the next flavor in `order` when a pod has waited `fallback_after` seconds for a node of the current
    one; stays on the last one, `exhausted`, when it is the last. `fallback_after` <= 0 disables moving.
    """
    if not order:
        return FlavorDecision(None)
    active = current if current in order else order[0]
    since = current_since if active == current else None
    waiting = longest_waiting(pods, since)
    if waiting is None or fallback_after <= 0:
        return FlavorDecision(active, waiting=waiting)
    waited = (now - waiting.since).total_seconds()
    if waited < fallback_after:
        return FlavorDecision(active, waiting=waiting, requeue_after=fallback_after - waited)
    index = order.index(active)
    if index + 1 < len(order):
        # Looked at again one period on even if no pod event comes (the new pods may fail the same way).
        return FlavorDecision(order[index + 1], previous=active, waiting=waiting, requeue_after=fallback_after)
    return FlavorDecision(active, waiting=waiting, exhausted=True)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def fallback_message(decision: FlavorDecision, now: datetime) -> str:
    """The Event text of a change: both flavors, the pod and how long it waited, and the scheduler's reason."""
    waiting = decision.waiting
    pod, waited, why = (
        ("", 0.0, "") if waiting is None else (waiting.pod, (now - waiting.since).total_seconds(), waiting.message)
    )
    return c.MESSAGE_FLAVOR_FALLBACK.format(
        previous=decision.previous, active=decision.active, pod=pod, waited=_duration(waited), why=one_line(why)
    )


def no_flavor_fits(decision: FlavorDecision, main: OpenModel, service: Service) -> PodFinding | None:
    """The finding of a Service stuck on its last flavor: every flavor in its order was tried."""
    waiting = decision.waiting
    if waiting is None:
        return None
    claims = service.spec.model_claims
    tried = ", ".join(flavor_order(main, claims.inference_flavors if claims is not None else None))
    detail = c.MESSAGE_NO_FLAVOR_FITS.format(tried=tried, why=one_line(waiting.message))
    return PodFinding(waiting.pod, REASON_UNSCHEDULABLE, detail)


# Returning to a higher-priority flavor (global config `flavor-return-when-fits`).


def return_candidates(order: Sequence[str], active: str | None, since: datetime | None, now: datetime,
                      fallback_after: float) -> tuple[list[str], float | None]:  # fmt: skip
    """The flavors ahead of `active` to check for room, best first, and when to look again.

    A return is due once `active` has been in force a full fallback period, so flavors change at most once per
    period; nothing is due on the first flavor, with fallback off, or before the status records when `active`
    began."""
    if active not in order or fallback_after <= 0 or since is None:
        return [], None
    index = order.index(active)
    if index == 0:
        return [], None
    waited = (now - since).total_seconds()
    if waited < fallback_after:
        return [], fallback_after - waited
    return list(order[:index]), fallback_after


def flavor_request(flavor: Flavor) -> Resources:
    """What each pod rendered for `flavor` asks of a node, as far as the flavor decides it: its `limits`, which
    the pods get as requests (resources at zero ask for nothing)."""
    limits = {name: parse_quantity(value) for name, value in (flavor.limits or {}).items()}
    return {name: value for name, value in limits.items() if value > 0}


def return_if_room(
    decision: FlavorDecision,
    main: OpenModel,
    candidates: Sequence[str],
    needed: int,
    fallback_after: float,
    room_for: Callable[[Flavor], Room],
) -> FlavorDecision:
    """`decision`, or a move back to the best of `candidates` whose nodes have room for `needed` pods now."""
    for name in candidates:
        flavor = find_flavor(main, name)
        if flavor is None:
            continue
        room = room_for(flavor)
        if room.pods >= needed:
            return FlavorDecision(name, previous=decision.active, requeue_after=fallback_after, room=room)
    return decision


def pods_per_service(service: Service) -> int:
    """The pods a Service runs: its replicas times the LeaderWorkerSet group size."""
    size = service.spec.workload_template.get("size") or 1
    replicas = service.spec.replicas if service.spec.replicas is not None else 1
    return int(replicas) * int(size)


def template_tolerations(service: Service) -> list[dict[str, Any]]:
    """The tolerations every pod of the Service has: those of the worker template, and of the leader template too
    when there is one (a taint counts as tolerated only when both tolerate it)."""
    template = service.spec.workload_template
    worker = ((template.get("workerTemplate") or {}).get("spec") or {}).get("tolerations") or []
    leader_template = template.get("leaderTemplate")
    if not leader_template:
        return list(worker)
    leader = (leader_template.get("spec") or {}).get("tolerations") or []
    return [toleration for toleration in worker if toleration in leader]


def return_message(decision: FlavorDecision) -> str:
    """The Event text of a return: both flavors and the room found."""
    room = decision.room
    assert room is not None
    return c.MESSAGE_FLAVOR_RETURN.format(
        previous=decision.previous, active=decision.active, pods=room.pods, nodes=room.nodes
    )

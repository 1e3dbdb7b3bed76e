"""Inference flavors: which one a Service runs on, how its pods are pinned to it, and when to move to the next.

A model lists flavors in priority order (`spec.inferenceConfig.flavors`); a Service may claim some of them by name
(`spec.modelClaims.inferenceFlavors`). The Service controller renders its pods for ONE active flavor at a time:
that flavor's `limits` as requests and limits of `model-runner`, and its `nodeSelector` as REQUIRED node
affinity on the leader and worker templates alike, so a multi-host group never spans two flavors.

Invariants:
- Pure: pods and times are arguments, nothing is remembered between calls. The time a pod has been waiting is
  read from its `PodScheduled` condition's `lastTransitionTime`, counted from no earlier than the moment the
  active flavor last changed (`status.activeFlavorTime`), so there is at most one change per fallback period.
- Only pods the scheduler could not place for lack of a fitting node count (`blocks_on_fit`): a message naming
  `Insufficient <resource>` or a node affinity/selector mismatch, and nothing about volumes or claims. A pod
  waiting for a PersistentVolumeClaim would wait on every flavor: moving would not help.
- The order is the claimed list (flavors the model lacks are skipped), else the model's list. An active flavor
  no longer in the order starts over at its first entry.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llmaz.apis import Flavor, OpenModel, Service
from llmaz.apis import constants as c
from llmaz.controllers.builders.diagnosis import REASON_UNSCHEDULABLE, PodFinding, one_line

# The scheduler's texts (kube-scheduler's NodeResourcesFit and NodeAffinity plugins) that mean "no node of the
# right kind has room": only these move a Service to its next flavor.
_FIT_REASONS = re.compile(r"Insufficient \S+|didn't match Pod's node affinity/selector")
# Texts that mean the pod would wait on any flavor (VolumeBinding, VolumeZone, VolumeRestrictions, ...).
_NOT_FLAVOR_REASONS = re.compile(r"PersistentVolumeClaim|volume", re.IGNORECASE)
UNSCHEDULABLE = "Unschedulable"


def model_flavors(model: OpenModel) -> list[Flavor]:
    config = model.spec.inference_config
    return list((config.flavors if config is not None else None) or [])


def missing_flavors(model: OpenModel, claimed: Sequence[str] | None) -> list[str]:
    """The claimed flavor names `model` does not define, in claim order."""
    defined = {flavor.name for flavor in model_flavors(model)}
    return [name for name in claimed or () if name not in defined]


def flavor_order(model: OpenModel, claimed: Sequence[str] | None) -> list[str]:
    """The flavor names to try, best first: the claimed ones the model defines, else all of the model's."""
    defined = [flavor.name for flavor in model_flavors(model)]
    if claimed:
        return [name for name in dict.fromkeys(claimed) if name in defined]
    return list(dict.fromkeys(defined))


def find_flavor(model: OpenModel, name: str | None) -> Flavor | None:
    return next((flavor for flavor in model_flavors(model) if flavor.name == name), None)


def with_node_selector(template: dict[str, Any], node_selector: Mapping[str, str] | None) -> None:
    """AND `node_selector` into the template's required node affinity (mutates `template`).

    Every `nodeSelectorTerms` entry (the terms are ORed) gets one `In` expression per key, sorted by key, unless
    it already has that exact expression; without terms there is one term of these expressions. The user's own
    `nodeSelector`, preferred affinity and pod (anti-)affinity are left as they are.
    """
    if not node_selector:
        return
    expressions = [{"key": key, "operator": "In", "values": [node_selector[key]]} for key in sorted(node_selector)]
    if template.get("spec") is None:
        template["spec"] = {}
    spec = template["spec"]
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        existing = term.get("matchExpressions") or []
        term["matchExpressions"] = existing + [copy.deepcopy(e) for e in expressions if e not in existing]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    spec["affinity"] = affinity


def blocks_on_fit(message: str) -> bool:
    """Whether a scheduler message says no node fits the pod's resources or flavor labels, and nothing else
    that another flavor could not change (volumes, PersistentVolumeClaims)."""
    return bool(_FIT_REASONS.search(message)) and not _NOT_FLAVOR_REASONS.search(message)


def _condition(pod: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return next((cond for cond in conditions if cond.get("type") == type_), {})


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


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
        scheduled = _condition(pod, "PodScheduled")
        if scheduled.get("status") != "False" or scheduled.get("reason") != UNSCHEDULABLE:
            continue
        message = str(scheduled.get("message") or "")
        since = parse_time(scheduled.get("lastTransitionTime"))
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
    """

    active: str | None
    previous: str | None = None
    waiting: Waiting | None = None
    exhausted: bool = False
    requeue_after: float | None = None

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

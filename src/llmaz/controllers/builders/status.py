"""Status of Playgrounds and Services, computed from the objects they own; the time is an argument.

Invariants:
- Conditions follow apimachinery's SetStatusCondition: a new type is appended; for an existing type
  `lastTransitionTime` changes only when `status` flips, while reason, message and observedGeneration are updated
  in place. The order of conditions never changes.
- Every condition written carries `observedGeneration` = the object's `metadata.generation` (llmaz left it 0).
- Functions return a new status dict (never mutating their inputs); the caller writes it when it differs from the
  current one.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from llmaz.apis import Playground, Service
from llmaz.apis import constants as c

TRUE = "True"
FALSE = "False"


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serializes (a naive time is taken as UTC)."""
    aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((condition for condition in conditions or () if condition.get("type") == type_), None)


def is_condition(conditions: list[dict[str, Any]] | None, type_: str, state: str) -> bool:
    """Whether the condition `type_` exists with status `state` (an absent condition is neither True nor False)."""
    condition = find_condition(conditions, type_)
    return condition is not None and condition.get("status") == state


def set_condition(
    status: dict[str, Any], type_: str, state: str, reason: str, message: str, now: datetime, generation: int | None
) -> None:
    """Set one condition in `status["conditions"]` with SetStatusCondition semantics (mutates `status`)."""
    conditions = status.setdefault("conditions", [])
    existing = find_condition(conditions, type_)
    if existing is None:
        existing = {"type": type_, "status": state}
        if generation is not None:
            existing["observedGeneration"] = generation
        existing["lastTransitionTime"] = timestamp(now)
        conditions.append(existing)
    elif existing.get("status") != state:
        existing["status"] = state
        existing["lastTransitionTime"] = timestamp(now)
    if generation is not None:
        existing["observedGeneration"] = generation
    existing["reason"] = reason
    existing["message"] = message


def _status_of(obj: Playground | Service) -> dict[str, Any]:
    status: dict[str, Any] = copy.deepcopy(obj.status.to_dict()) if obj.status is not None else {}
    status.setdefault("replicas", 0)
    return status


def _copy_scale(status: dict[str, Any], replicas: int | None, selector: str | None) -> None:
    status["replicas"] = replicas or 0
    if selector:
        status["selector"] = selector
    else:
        status.pop("selector", None)


def abort_status(obj: Playground | Service, message: str, now: datetime) -> dict[str, Any]:
    """`Progressing=False` with reason `AbortProcessing` and `message` (a conflict or a missing input)."""
    status = _status_of(obj)
    progressing = c.CONDITION_PROGRESSING
    set_condition(status, progressing, FALSE, c.REASON_ABORT_PROCESSING, message, now, obj.metadata.generation)
    return status


def playground_status(playground: Playground, service: Service | None, now: datetime) -> dict[str, Any]:
    """The Playground's status mirroring its inference Service (None when it did not exist)."""
    status = _status_of(playground)
    generation = playground.metadata.generation
    service_conditions = service.status.conditions if service is not None and service.status is not None else None
    if not status.get("conditions") or is_condition(status["conditions"], c.CONDITION_PROGRESSING, FALSE):
        set_condition(
            status,
            c.CONDITION_PROGRESSING,
            TRUE,
            c.REASON_PENDING,
            c.MESSAGE_WAITING_FOR_SERVICE_READY,
            now,
            generation,
        )
    elif is_condition(service_conditions, c.CONDITION_AVAILABLE, TRUE):
        set_condition(
            status, c.CONDITION_AVAILABLE, TRUE, c.REASON_PLAYGROUND_READY, c.MESSAGE_PLAYGROUND_READY, now, generation
        )
    elif find_condition(status["conditions"], c.CONDITION_AVAILABLE) is not None:
        progressing = (c.REASON_PLAYGROUND_IN_PROGRESS, c.MESSAGE_WAITING_FOR_SERVICE_PROGRESSING)
        set_condition(status, c.CONDITION_PROGRESSING, TRUE, *progressing, now, generation)
        not_ready = (c.REASON_PLAYGROUND_NOT_READY, c.MESSAGE_WAITING_FOR_SERVICE_READY)
        set_condition(status, c.CONDITION_AVAILABLE, FALSE, *not_ready, now, generation)
    observed = service.status if service is not None else None
    _copy_scale(status, observed.replicas if observed else 0, observed.selector if observed else None)
    return status


def service_status(service: Service, lws: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """The Service's status mirroring its LeaderWorkerSet (a plain dict as read from the cache)."""
    status = _status_of(service)
    generation = service.metadata.generation
    lws_status = (lws or {}).get("status") or {}
    if is_condition(lws_status.get("conditions"), c.CONDITION_AVAILABLE, TRUE):
        set_condition(
            status, c.CONDITION_AVAILABLE, TRUE, c.REASON_SERVICE_READY, c.MESSAGE_SERVICE_READY, now, generation
        )
    else:
        progressing = (c.REASON_SERVICE_IN_PROGRESS, c.MESSAGE_SERVICE_IN_PROGRESS)
        set_condition(status, c.CONDITION_PROGRESSING, TRUE, *progressing, now, generation)
        if find_condition(status.get("conditions"), c.CONDITION_AVAILABLE) is not None:
            not_ready = (c.REASON_SERVICE_NOT_READY, c.MESSAGE_WAITING_FOR_LWS_READY)
            set_condition(status, c.CONDITION_AVAILABLE, FALSE, *not_ready, now, generation)
    _copy_scale(status, lws_status.get("replicas"), lws_status.get("hpaPodSelector"))
    return status

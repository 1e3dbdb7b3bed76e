"""Status of Playgrounds and Services, computed from the objects they own; the time is an argument.

Invariants:
- Conditions follow apimachinery's SetStatusCondition: a new type is appended; for an existing type
  `lastTransitionTime` changes only when `status` flips, while reason, message and observedGeneration are updated
  in place. The order of conditions never changes.
- Every condition written carries `observedGeneration` = the object's `metadata.generation` (llmaz left it 0).
- Functions return a new status dict (never mutating their inputs); the caller writes it when it differs from the
  current one.
- Why pods are not ready (a `PodFinding`) goes into the message of a `Progressing=True` condition, after its
  normal message and `: `; reasons stay llmaz's. The Playground mirrors its Service's finding the same way.
  Without a finding the message is exactly llmaz's, so `llmaz.apis.conditions.progressing_finding` can read a
  finding back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llmaz.apis import OpenModel, Playground, Service
from llmaz.apis import constants as c
from llmaz.apis.conditions import FINDING_SEPARATOR, find_condition, progressing_finding
from llmaz.apis.conditions import PLAYGROUND_PROGRESSING as _PLAYGROUND_PROGRESSING
from llmaz.apis.conditions import SERVICE_PROGRESSING as _SERVICE_PROGRESSING
from llmaz.controllers.builders.diagnosis import PodFinding

TRUE = "True"
FALSE = "False"


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serializes (a naive time is taken as UTC)."""
    aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    status: dict[str, Any] = obj.status.to_dict() if obj.status is not None else {}  # a fresh dict
    status.setdefault("replicas", 0)
    return status


def _copy_scale(status: dict[str, Any], replicas: int | None, selector: str | None) -> None:
    status["replicas"] = replicas or 0
    if selector:
        status["selector"] = selector
    else:
        status.pop("selector", None)


def _mirror_finding(
    status: dict[str, Any], normal: dict[str, str], finding: str | None, now: datetime, generation: int | None
) -> None:
    """Put `finding` into an in-progress `Progressing` message, or restore the normal message without one."""
    condition = find_condition(status.get("conditions"), c.CONDITION_PROGRESSING)
    if condition is None or condition.get("status") != TRUE:
        return
    reason = str(condition.get("reason") or "")
    base = normal.get(reason)
    if base is None:
        return
    message = f"{base}{FINDING_SEPARATOR}{finding}" if finding else base
    if condition.get("message") != message:
        set_condition(status, c.CONDITION_PROGRESSING, TRUE, reason, message, now, generation)


def abort_status(obj: Playground | Service, message: str, now: datetime) -> dict[str, Any]:
    """`Progressing=False` with reason `AbortProcessing` and `message` (a conflict or a missing input)."""
    status = _status_of(obj)
    progressing = c.CONDITION_PROGRESSING
    set_condition(status, progressing, FALSE, c.REASON_ABORT_PROCESSING, message, now, obj.metadata.generation)
    return status


def playground_status(playground: Playground, service: Service | None, now: datetime) -> dict[str, Any]:
    """The Playground's status mirroring its inference Service (None when it did not exist).

    llmaz's condition sequence, then the Service's finding (why its pods are not ready) copied into the
    Playground's in-progress `Progressing` message, or taken out again once the Service has none.
    """
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
    service_finding = progressing_finding(observed.to_dict()) if observed is not None else None
    _mirror_finding(status, _PLAYGROUND_PROGRESSING, service_finding, now, generation)
    _mirror_adapters(status, service, now, generation)
    _copy_scale(status, observed.replicas if observed else 0, observed.selector if observed else None)
    return status


def service_status(
    service: Service, lws: dict[str, Any] | None, now: datetime, finding: PodFinding | None = None
) -> dict[str, Any]:
    """The Service's status mirroring its LeaderWorkerSet (a plain dict as read from the cache).

    `finding` (why a pod is not ready) goes into the in-progress `Progressing` message. When the LWS is
    Available, llmaz leaves `Progressing` as it was; only a finding, or a stale one, changes its message then.
    """
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
    _mirror_finding(status, _SERVICE_PROGRESSING, finding.message if finding else None, now, generation)
    _copy_scale(status, lws_status.get("replicas"), lws_status.get("hpaPodSelector"))
    return status


def with_flavor(
    service: Service,
    status: dict[str, Any],
    active: str | None,
    changed: bool,
    missing: list[str],
    model: str,
    now: datetime,
) -> dict[str, Any]:
    """`status` (mutated and returned) recording the active flavor, when it changed, and claimed flavors the
    model lacks (`FlavorsResolved`, written only once a flavor was missing, then kept up to date)."""
    if active is None:
        status.pop("activeFlavor", None)
        status.pop("activeFlavorTime", None)
    elif changed or status.get("activeFlavor") != active:
        status["activeFlavor"] = active
        status["activeFlavorTime"] = timestamp(now)
    generation = service.metadata.generation
    resolved = c.CONDITION_FLAVORS_RESOLVED
    if missing:
        using = f"using {active}" if active else "no flavor resources or node affinity are applied"
        message = c.MESSAGE_FLAVOR_NOT_FOUND.format(model=model, flavors=", ".join(missing), using=using)
        set_condition(status, resolved, FALSE, c.REASON_FLAVOR_NOT_FOUND, message, now, generation)
    elif find_condition(status.get("conditions"), resolved) is not None:
        message = c.MESSAGE_FLAVORS_FOUND.format(model=model)
        set_condition(status, resolved, TRUE, c.REASON_FLAVORS_FOUND, message, now, generation)
    return status


def with_adapters(
    service: Service, status: dict[str, Any], unavailable: list[dict[str, Any]], main: OpenModel, now: datetime
) -> dict[str, Any]:
    """`status` (mutated and returned) recording the adapters left out (`adapters.unavailable_adapters`) and the
    `AdaptersReady` condition: written once an adapter was left out, then kept up to date."""
    if unavailable:
        status["unavailableAdapters"] = unavailable
    else:
        status.pop("unavailableAdapters", None)
    generation = service.metadata.generation
    model = main.metadata.name or ""
    ready = c.CONDITION_ADAPTERS_READY
    if unavailable:
        index = {adapter.name: i for i, adapter in enumerate(main.spec.adapters or ())}
        message = "; ".join(
            c.MESSAGE_ADAPTER_UNAVAILABLE.format(
                adapter=entry["name"], index=index.get(entry["name"]), model=model, finding=entry["message"]
            )
            for entry in unavailable
        )
        set_condition(status, ready, FALSE, c.REASON_ADAPTER_UNAVAILABLE, message, now, generation)
    elif find_condition(status.get("conditions"), ready) is not None:
        message = c.MESSAGE_ADAPTERS_AVAILABLE.format(model=model)
        set_condition(status, ready, TRUE, c.REASON_ADAPTERS_AVAILABLE, message, now, generation)
    return status


def _mirror_adapters(status: dict[str, Any], service: Service | None, now: datetime, generation: int | None) -> None:
    """The Service's `AdaptersReady` condition, copied to its Playground."""
    conditions = service.status.conditions if service is not None and service.status is not None else None
    observed = find_condition(conditions, c.CONDITION_ADAPTERS_READY)
    if observed is not None:
        state, reason, message = (str(observed.get(key) or "") for key in ("status", "reason", "message"))
        set_condition(status, c.CONDITION_ADAPTERS_READY, state, reason, message, now, generation)


def with_model_routing(playground: Playground, status: dict[str, Any], model: str, taken: bool, now: datetime) -> None:
    """Record in `status` (mutated) whether llmaz-gateway routes the Playground's main `model` to it: `ModelRouted`
    is False (`ModelNameTaken`) while another namespace owns the model name (`taken`), written only once that
    happened, then kept up to date (True, `ModelNameOwned`). The message never names the other namespace."""
    generation = playground.metadata.generation
    routed = c.CONDITION_MODEL_ROUTED
    if taken:
        message = c.MESSAGE_MODEL_NAME_TAKEN.format(model=model, annotation=c.SERVE_ACROSS_NAMESPACES_ANNOTATION)
        set_condition(status, routed, FALSE, c.REASON_MODEL_NAME_TAKEN, message, now, generation)
    elif find_condition(status.get("conditions"), routed) is not None:
        message = c.MESSAGE_MODEL_NAME_OWNED.format(model=model)
        set_condition(status, routed, TRUE, c.REASON_MODEL_NAME_OWNED, message, now, generation)


@dataclass(frozen=True, slots=True)
class PoolCondition:
    """What the `InferencePool` condition of a Playground that asks for a pool says."""

    state: str
    reason: str
    message: str


def with_inference_pool(
    playground: Playground, status: dict[str, Any], pool: PoolCondition | None, now: datetime
) -> None:
    """Record in `status` (mutated) what became of the Playground's InferencePool: the `InferencePool` condition as
    `pool` says, or none at all when `pool` is None (the Playground asks for no pool)."""
    if pool is None:
        conditions = status.get("conditions")
        if conditions:
            status["conditions"] = [cond for cond in conditions if cond.get("type") != c.CONDITION_INFERENCE_POOL]
        return
    set_condition(
        status, c.CONDITION_INFERENCE_POOL, pool.state, pool.reason, pool.message, now, playground.metadata.generation
    )

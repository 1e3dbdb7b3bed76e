"""OpenModel and BackendRuntime reconcilers: a `Ready` condition saying whether the object is usable.

llmaz's controllers for these kinds did nothing. Here each reconcile checks what only a controller can check
(webhooks may be off, or the object predates them) and reports it, so `kubectl get` shows a broken model or
backend before a Playground trips over it:
- OpenModel: the source, and every adapter's, resolves to a path and a loader (hub or a supported, well-formed
  URI; no ollama:// adapter);
- BackendRuntime: recommended config names are unique, limits are not below requests, and every argument
  placeholder is one llmaz knows.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from llmaz.apis import BackendRuntime, OpenModel
from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.quantity import QuantityError, parse_quantity
from llmaz.controllers.builders import BuildError, set_condition
from llmaz.controllers.builders.render import render_arg
from llmaz.controllers.builders.sources import Weights, adapters, loader_env
from llmaz.controllers.common import reconcile_cached, write_status_if_changed
from llmaz.runtime.cache import Obj, Store
from llmaz.runtime.client import Client
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource

RBAC_RULES = (
    allow(r.OPEN_MODELS, "update", subresource="status"),
    allow(r.BACKEND_RUNTIMES, "update", subresource="status"),
)
_PLACEHOLDER_PROBE = {"ModelPath": "/probe", "ModelName": "probe", "DraftModelPath": "/probe-draft"}


def model_problem(obj: Obj) -> str | None:
    """Why an OpenModel cannot be served, or None."""
    try:
        model = OpenModel.from_dict(obj)
        for weights in [Weights(model), *adapters(model)]:
            loader_env(weights)
    except ValidationError as err:
        return f"does not match its schema: {err.errors()[0]['msg']}"
    except BuildError as err:
        return err.message
    return None


def backend_problem(obj: Obj) -> str | None:
    """Why a BackendRuntime cannot serve, or None."""
    try:
        backend = BackendRuntime.from_dict(obj)
    except ValidationError as err:
        return f"does not match its schema: {err.errors()[0]['msg']}"
    seen: set[str] = set()
    for config in backend.spec.recommended_configs or ():
        if config.name in seen:
            return f"duplicated recommended config name {config.name}"
        seen.add(config.name)
        problem = _resource_problem(config.name, config.resources.to_dict() if config.resources else {})
        problem = problem or _args_problem(config.name, config.args or [])
        if problem:
            return problem
    return None


def _resource_problem(config: str, resources: dict[str, Any]) -> str | None:
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for key in sorted(set(limits) & set(requests)):
        try:
            if parse_quantity(limits[key]) < parse_quantity(requests[key]):
                return f"recommended config {config}: resource limit of {key} is less than resource request"
        except QuantityError:
            return f"recommended config {config}: invalid quantity for {key}"
    return None


def _args_problem(config: str, args: list[str]) -> str | None:
    for arg in args:
        try:
            render_arg(arg, _PLACEHOLDER_PROBE)
        except BuildError as err:
            return f"recommended config {config}: {err.message}"
    return None


class ReadinessReconciler:
    """Sets `Ready` True/False on objects of one cluster-scoped kind from a `problem` check."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        store: Store,
        problem: Callable[[Obj], str | None],
        reasons: tuple[str, str],
        clock: Clock,
    ) -> None:
        self._client = client
        self._resource = resource
        self._store = store
        self._problem = problem
        self._ready_reason, self._not_ready_reason = reasons
        self._clock = clock

    async def reconcile(self, request: Request) -> Result:
        return await reconcile_cached(self._resource, self._store, request, self._report)

    async def _report(self, request: Request, obj: Obj) -> Result:
        status = _ready_status(obj, self._problem(obj), self._ready_reason, self._not_ready_reason, self._clock.wall())
        await write_status_if_changed(self._client, self._resource, obj, status)
        return Result()


def _ready_status(obj: Obj, problem: str | None, ready: str, not_ready: str, now: datetime) -> dict[str, Any]:
    status: dict[str, Any] = {**(obj.get("status") or {})}
    status["conditions"] = [dict(condition) for condition in status.get("conditions") or []]
    generation = (obj.get("metadata") or {}).get("generation")
    kind = obj.get("kind", "object")
    if problem is None:
        set_condition(status, c.CONDITION_READY, "True", ready, f"{kind} is ready", now, generation)
    else:
        set_condition(status, c.CONDITION_READY, "False", not_ready, f"{kind} {problem}", now, generation)
    return status


def model_reconciler(client: Client, store: Store, clock: Clock) -> ReadinessReconciler:
    return ReadinessReconciler(
        client, r.OPEN_MODELS, store, model_problem, (c.REASON_MODEL_READY, c.REASON_INVALID_MODEL), clock
    )


def backend_reconciler(client: Client, store: Store, clock: Clock) -> ReadinessReconciler:
    return ReadinessReconciler(
        client, r.BACKEND_RUNTIMES, store, backend_problem, (c.REASON_BACKEND_READY, c.REASON_INVALID_BACKEND), clock
    )

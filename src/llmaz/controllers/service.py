"""The inference Service reconciler: Service -> LeaderWorkerSet + `<name>-lb` Service, and the Service's status.

One reconcile:
1. Read the Service from the cache; gone -> done, also when a write finds it deleted during the reconcile.
2. Run the admission rules (`validate_service`, as on create): a Service stored without admission that the
   webhook would deny -> `Progressing=False`/`AbortProcessing` with the webhook's text, a Warning Event, no
   children, and no retry until it changes.
3. Without valid global settings (`llmaz-global-config`) nothing can be built: stop there, without an error or a
   retry; the ConfigMap watch re-enqueues every Service when the settings arrive or change (llmaz waited for an
   unrelated event), and `globalconfig` says once, with the fix, why nothing happens meanwhile.
4. Persist the global scheduler name into pod templates that name none (llmaz's contract), with a merge patch
   of just those fields, and only when missing (a Playground's Service already has it from its creation).
5. Fetch the claimed OpenModels; a missing one or an unusable source -> `Progressing=False`/`AbortProcessing`.
6. An existing LeaderWorkerSet or `-lb` Service that this Service does not control (`ownership_conflict`) ->
   `Progressing=False`/`AbortProcessing` naming it and its controller, a Warning Event, nothing applied, and a
   rate-limited retry (llmaz force-applied over it and took it over).
7. Decide the active inference flavor (`builders.flavors.decide_flavor`): the one in the status, or the next when
   the pods waited `flavor-fallback-after` for a node of it (a Warning Event `FlavorFallback` names both); with
   `flavor-return-when-fits`, a full period after the last change, the best flavor ahead of it whose nodes have
   room for every pod now (nodes and their pods read from the API server; a Normal Event `FlavorReturn`). The
   pods are rendered for it. A decision that falls due later requeues the Service for that moment.
8. Apply the LeaderWorkerSet and the `-lb` Service when they differ from the live objects (llmaz created the
   `-lb` Service once and never repaired it); an `Applied` Event marks the LeaderWorkerSet's creation.
9. Compute the status from the LeaderWorkerSet and the pods (why they are not ready: a failed model loader, a
   crash loop, an image pull, scheduling; on the last flavor, that no flavor fits) with the active flavor, and
   write it when it changed; a new finding is also a Warning Event.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmaz.apis import OpenModel, Service
from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.serving import lb_service_name
from llmaz.apis.validation import validate_service
from llmaz.controllers import indexes as ix
from llmaz.controllers.builders import (
    BuildError,
    ChildConflictError,
    InvalidSpecError,
    abort_status,
    build_lb_service,
    build_leader_worker_set,
    diagnose_pods,
    ownership_conflict,
    service_model_refs,
    service_status,
    with_scheduler_name,
)
from llmaz.controllers.builders.flavors import (
    FlavorDecision,
    decide_flavor,
    fallback_message,
    find_flavor,
    flavor_order,
    missing_flavors,
    no_flavor_fits,
    parse_time,
    pods_per_service,
    return_candidates,
    return_message,
    room_on,
    schedulable,
    template_tolerations,
)
from llmaz.controllers.builders.service import claimed_flavors
from llmaz.controllers.builders.status import with_flavor
from llmaz.controllers.common import (
    apply_if_changed,
    fetch_models,
    live_child,
    parse_cached,
    record_new_finding,
    unless_deleted,
    write_status_if_changed,
)
from llmaz.runtime.cache import Obj
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import Client, PatchType
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import NORMAL, WARNING, EventRecorder
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.settings import SettingsHolder

# Where the API server enforces owner-reference permissions (OwnerReferencesPermissionEnforcement, on in
# OpenShift): blockOwnerDeletion needs `update` on the owner's finalizers, and changing the owner reference of
# an existing object (a Service re-created under the same name takes over its leftovers) needs `delete` on it.
RBAC_RULES = (
    allow(r.INFERENCE_SERVICES, "patch"),  # the scheduler name, merge-patched into the spec
    allow(r.INFERENCE_SERVICES, "update", subresource="status"),
    allow(r.INFERENCE_SERVICES, "update", subresource="finalizers"),
    allow(r.LEADER_WORKER_SETS, "create", "patch", "delete"),  # server-side apply
    allow(r.SERVICES, "create", "patch", "delete"),  # the `-lb` Service, server-side apply
    # flavor-return-when-fits: a better flavor's nodes and the pods bound to them, read once per fallback period.
    allow(r.NODES, "list"),
    allow(r.PODS, "list"),
)

_log = get_logger("llmaz.controllers.service")


def _sooner(first: float | None, second: float | None) -> float | None:
    return min((t for t in (first, second) if t is not None), default=None)


class ServiceReconciler:
    def __init__(
        self,
        client: Client,
        informers: SharedInformerFactory,
        events: EventRecorder,
        clock: Clock,
        settings: SettingsHolder,
    ) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self._settings = settings
        self._services = informers.informer_for(r.INFERENCE_SERVICES).store
        self._models = informers.informer_for(r.OPEN_MODELS).store
        self._lws = informers.informer_for(r.LEADER_WORKER_SETS).store
        self._lb_services = informers.informer_for(r.SERVICES).store
        self._pods = informers.informer_for(r.PODS, label_selector=ix.MODEL_POD_SELECTOR).store

    async def reconcile(self, request: Request) -> Result:
        return await unless_deleted(r.INFERENCE_SERVICES, request, self._reconcile)

    async def _reconcile(self, request: Request) -> Result:
        obj = self._services.get(request.key)
        if obj is None:
            return Result()
        service = parse_cached(Service, obj, request.key)
        invalid = validate_service(service, creating=True)
        if invalid:
            # Not retried: only an edit can fix it, and the edit's own event reconciles it again.
            await self._abort(obj, service, InvalidSpecError(invalid))
            return Result()
        settings = self._settings.current
        if settings is None:
            _log.debug("waiting for the global config", reason=self._settings.last_error or "no ConfigMap")
            return Result()
        obj, service = await self._persist_scheduler_name(obj, service, settings.scheduler_name)
        pods = self._pods.by_index(ix.POD_SERVICE, request.key)
        now = self._clock.wall()
        try:
            models = fetch_models(self._models, service_model_refs(service))
            order = flavor_order(models[0], claimed_flavors(service))
            current = service.status.active_flavor if service.status is not None else None
            since = parse_time(service.status.active_flavor_time) if service.status is not None else None
            fallback_after = settings.flavor_fallback_after
            flavor = decide_flavor(order, current, since, pods, now, fallback_after)
            if settings.flavor_return_when_fits and flavor.previous is None and flavor.waiting is None:
                candidates, recheck = return_candidates(order, flavor.active, since, now, fallback_after)
                # Node capacity changes wake no reconcile: off the first flavor, look again once per period.
                flavor = replace(flavor, requeue_after=_sooner(flavor.requeue_after, recheck))
                flavor = await self._return_if_room(service, models[0], flavor, candidates, fallback_after)
            desired_lws = build_leader_worker_set(service, models, settings.init_container_image, flavor.active)
            desired_lb = build_lb_service(service, models)
        except BuildError as err:
            await self._abort(obj, service, err)
            return Result()
        ns, lb_name = request.namespace, lb_service_name(request.name)
        live_lws = await live_child(self._client, self._lws, r.LEADER_WORKER_SETS, ns, request.name)
        live_lb = await live_child(self._client, self._lb_services, r.SERVICES, ns, lb_name)
        children = ((r.LEADER_WORKER_SETS.kind, live_lws), (r.SERVICES.kind, live_lb))
        conflicts = [found for kind, live in children if (found := ownership_conflict(service, kind, live))]
        if conflicts:
            await self._abort(obj, service, ChildConflictError(service, conflicts))
            # Retried with the rate limiter's backoff; the name-based watches in setup.py also wake this Service
            # at once when the object in the way is deleted or changes controller.
            return Result(requeue=True)
        lws, written = await apply_if_changed(self._client, r.LEADER_WORKER_SETS, desired_lws, live_lws)
        if written and live_lws is None:
            self._events.event(obj, "Normal", "Applied", f"Applied LeaderWorkerSet {request.key}")
        await apply_if_changed(self._client, r.SERVICES, desired_lb, live_lb)
        finding = no_flavor_fits(flavor, models[0], service) if flavor.exhausted else diagnose_pods(pods)
        status = service_status(service, lws, now, finding)
        main, claimed = models[0], claimed_flavors(service)
        missing = missing_flavors(main, claimed)
        with_flavor(service, status, flavor.active, flavor.changed, missing, main.metadata.name or "", now)
        if await write_status_if_changed(self._client, r.INFERENCE_SERVICES, obj, status):
            # After the write: a change whose status write failed is decided (and reported) again.
            if flavor.room is not None:
                self._events.event(obj, NORMAL, c.EVENT_FLAVOR_RETURN, return_message(flavor))
            elif flavor.changed:
                self._events.event(obj, WARNING, c.EVENT_FLAVOR_FALLBACK, fallback_message(flavor, now))
            record_new_finding(self._events, obj, status)
        return Result(requeue_after=flavor.requeue_after)

    async def _return_if_room(
        self, service: Service, main: OpenModel, decision: FlavorDecision, candidates: list[str], fallback_after: float
    ) -> FlavorDecision:
        """`decision`, or a move back to the best of `candidates` whose nodes have room for every pod now."""
        needed = pods_per_service(service)
        tolerations = template_tolerations(service)
        for name in candidates:
            flavor = find_flavor(main, name)
            if flavor is None:
                continue
            room = room_on(flavor, *await self._nodes_and_pods(flavor.node_selector, tolerations), tolerations)
            if room.pods >= needed:
                return FlavorDecision(name, previous=decision.active, requeue_after=fallback_after, room=room)
        return decision

    async def _nodes_and_pods(
        self, node_selector: dict[str, str] | None, tolerations: list[dict[str, Any]]
    ) -> tuple[list[Obj], dict[str, list[Obj]]]:
        """The schedulable nodes with these labels, and the pods bound to each that have not ended: read from the
        API server, not cached, one list of Pods per such node."""
        selector = ",".join(f"{key}={value}" for key, value in sorted((node_selector or {}).items())) or None
        nodes = [
            n for n in (await self._client.list(r.NODES, label_selector=selector)).items if schedulable(n, tolerations)
        ]
        pods: dict[str, list[Obj]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            bound = f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"
            pods[name] = (await self._client.list(r.PODS, field_selector=bound)).items
        return nodes, pods

    async def _abort(self, obj: Obj, service: Service, err: BuildError) -> None:
        """`Progressing=False`/`AbortProcessing` with the error's message; a Warning Event when that is news."""
        status = abort_status(service, err.message, self._clock.wall())
        if await write_status_if_changed(self._client, r.INFERENCE_SERVICES, obj, status):
            # The event reason names the cause: ModelNotFound, InvalidSpec, ChildConflict, ...
            self._events.event(obj, WARNING, type(err).__name__.removesuffix("Error"), err.message)

    async def _persist_scheduler_name(self, obj: Obj, service: Service, scheduler: str) -> tuple[Obj, Service]:
        template = service.spec.workload_template
        wanted = with_scheduler_name(template, scheduler)
        if wanted == template:
            return obj, service
        patch: dict[str, Any] = {}
        for key in ("leaderTemplate", "workerTemplate"):
            if key in wanted and wanted[key] != template.get(key):
                patch[key] = {"spec": {"schedulerName": wanted[key]["spec"]["schedulerName"]}}
        meta = service.metadata
        patched = await self._client.patch(
            r.INFERENCE_SERVICES,
            meta.name or "",
            {"metadata": {"resourceVersion": meta.resource_version}, "spec": {"workloadTemplate": patch}},
            meta.namespace,
            patch_type=PatchType.MERGE,
            field_manager="llmaz",
        )
        return patched, Service.from_dict(patched)

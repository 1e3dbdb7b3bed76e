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
7. Decide the active inference flavor (`flavors.decision.decide_flavor`): the one in the status, or the next when
   the pods waited `flavor-fallback-after` for a node of it (a Warning Event `FlavorFallback` names both); with
   `flavor-return-when-fits`, a full period after the last change, the best flavor ahead of it whose nodes have
   room for every pod now (`flavors.capacity`: nodes and the pods bound to them, cached from the first such check
   on; a Normal Event `FlavorReturn`). The pods are rendered for it. A decision that falls due later requeues
   the Service for that moment.
8. Apply the LeaderWorkerSet and the `-lb` Service when they differ from the live objects (llmaz created the
   `-lb` Service once and never repaired it); an `Applied` Event marks the LeaderWorkerSet's creation.
   A Service annotated `llmaz.io/network-policy: gateway-only` (a Playground's annotation is copied to its
   Service) also gets its NetworkPolicy (`builders.networkpolicy`), applied when it differs; a policy of its name
   that it does not control is a conflict like the others in 6, and stops the reconcile there. A Service that no
   longer asks deletes the policy it controls (uid precondition; a Normal Event `Deleted`), never anyone else's.
9. Compute the status from the LeaderWorkerSet and the pods (why they are not ready: a failed model loader, a
   crash loop, an image pull, scheduling; on the last flavor, that no flavor fits) with the active flavor, and
   write it when it changed; a new finding is also a Warning Event.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmaz.apis import Flavor, OpenModel, Service
from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.networkpolicy import wants_gateway_only
from llmaz.apis.serving import lb_service_name
from llmaz.apis.validation import FieldError, validate_service
from llmaz.controllers import indexes as ix
from llmaz.controllers.builders import (
    BuildError,
    ChildConflictError,
    build_lb_service,
    build_leader_worker_set,
    build_network_policy,
    diagnose_pods,
    ownership_conflict,
    service_model_refs,
    service_status,
    skip_model_loader,
    with_scheduler_name,
)
from llmaz.controllers.builders.adapters import adapter_loader_envs, adapter_paths, unavailable_adapters
from llmaz.controllers.builders.diagnosis import unusable_adapters
from llmaz.controllers.builders.flavors import flavor_order, missing_flavors
from llmaz.controllers.builders.security import PodOptions
from llmaz.controllers.builders.service import claimed_flavors
from llmaz.controllers.builders.status import with_adapters, with_flavor
from llmaz.controllers.common import (
    ParentReconciler,
    apply_if_changed,
    fetch_models,
    is_controlled_by,
    live_child,
    record_left_out_adapters,
    record_new_finding,
    write_status_if_changed,
)
from llmaz.controllers.flavors.capacity import NodeCapacity
from llmaz.controllers.flavors.decision import (
    FlavorDecision,
    decide_flavor,
    fallback_message,
    flavor_request,
    no_flavor_fits,
    pods_per_service,
    return_candidates,
    return_if_room,
    return_message,
    template_tolerations,
)
from llmaz.controllers.flavors.fit import Room
from llmaz.runtime.cache import Obj
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import NotFound, PatchType
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import NORMAL, WARNING
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import READ, allow
from llmaz.runtime.timestamp import parse_timestamp

# Where the API server enforces owner-reference permissions (OwnerReferencesPermissionEnforcement, on in
# OpenShift): blockOwnerDeletion needs `update` on the owner's finalizers, and changing the owner reference of
# an existing object (a Service re-created under the same name takes over its leftovers) needs `delete` on it.
RBAC_RULES = (
    allow(r.INFERENCE_SERVICES, "patch"),  # the scheduler name, merge-patched into the spec
    allow(r.INFERENCE_SERVICES, "update", subresource="status"),
    allow(r.INFERENCE_SERVICES, "update", subresource="finalizers"),
    allow(r.LEADER_WORKER_SETS, "create", "patch", "delete"),  # server-side apply
    allow(r.SERVICES, "create", "patch", "delete"),  # the `-lb` Service, server-side apply
    # The gateway-only NetworkPolicy: applied when asked for, deleted (only when controlled) when no longer.
    allow(r.NETWORK_POLICIES, "create", "patch", "delete"),
    # flavor-return-when-fits: the nodes and the pods bound to them, cached from the first return check on.
    allow(r.NODES, *READ),
    allow(r.PODS, *READ),
)

_log = get_logger("llmaz.controllers.service")


# While the node and pod caches fill (the first return check of this manager), look again this soon.
CAPACITY_SYNC_RECHECK = 2.0


def _sooner(first: float | None, second: float | None) -> float | None:
    return min((t for t in (first, second) if t is not None), default=None)


class ServiceReconciler(ParentReconciler[Service]):
    resource = r.INFERENCE_SERVICES
    model = Service

    def __init__(
        self, *args: Any, capacity: NodeCapacity, gateway_namespace: str = c.GLOBAL_CONFIG_NAMESPACE, **kwargs: Any
    ) -> None:
        """`capacity` answers whether a flavor's nodes have room (flavor return); `gateway_namespace` is where
        llmaz-gateway's pods run, which a gateway-only NetworkPolicy admits; the rest as `ParentReconciler`."""
        self._capacity = capacity
        self._gateway_namespace = gateway_namespace
        super().__init__(*args, **kwargs)

    def watch(self, informers: SharedInformerFactory) -> None:
        self._lws = informers.informer_for(r.LEADER_WORKER_SETS).store
        self._lb_services = informers.informer_for(r.SERVICES).store
        self._policies = informers.informer_for(r.NETWORK_POLICIES).store
        self._pods = informers.informer_for(r.PODS, label_selector=ix.MODEL_POD_SELECTOR).store

    def validate(self, service: Service) -> list[FieldError]:
        return validate_service(service, creating=True, reconciling=True)

    async def converge(self, request: Request, obj: Obj, service: Service) -> Result:
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
            since = parse_timestamp(service.status.active_flavor_time) if service.status is not None else None
            fallback_after = settings.flavor_fallback_after
            flavor = decide_flavor(order, current, since, pods, now, fallback_after)
            if settings.flavor_return_when_fits and flavor.previous is None and flavor.waiting is None:
                candidates, recheck = return_candidates(order, flavor.active, since, now, fallback_after)
                # Node capacity changes wake no reconcile: off the first flavor, look again once per period.
                flavor = replace(flavor, requeue_after=_sooner(flavor.requeue_after, recheck))
                if candidates:
                    flavor = self._return_if_room(service, models[0], flavor, candidates, fallback_after)
            pod_options = PodOptions(
                settings.model_pod_security, settings.model_loader_resources, settings.model_volume_size_limit
            )
            desired_lws = build_leader_worker_set(
                service, models, settings.init_container_image, flavor.active, pod_options
            )
            desired_lb = build_lb_service(service, models)
            gateway_only = wants_gateway_only(service.metadata.annotations)
            desired_policy = build_network_policy(service, self._gateway_namespace) if gateway_only else None
        except BuildError as err:
            await self.abort(obj, service, err)
            return Result()
        ns, lb_name = request.namespace, lb_service_name(request.name)
        live_lws = await live_child(self._client, self._lws, r.LEADER_WORKER_SETS, ns, request.name)
        live_lb = await live_child(self._client, self._lb_services, r.SERVICES, ns, lb_name)
        children = [(r.LEADER_WORKER_SETS.kind, live_lws), (r.SERVICES.kind, live_lb)]
        live_policy = self._policies.get(request.key)
        if desired_policy is not None:
            live_policy = await live_child(self._client, self._policies, r.NETWORK_POLICIES, ns, request.name)
            children.append((r.NETWORK_POLICIES.kind, live_policy))
        conflicts = [found for kind, live in children if (found := ownership_conflict(service, kind, live))]
        if conflicts:
            await self.abort(obj, service, ChildConflictError(service, conflicts))
            # Retried with the rate limiter's backoff; the name-based watches in setup.py also wake this Service
            # at once when the object in the way is deleted or changes controller.
            return Result(requeue=True)
        lws, written = await apply_if_changed(self._client, r.LEADER_WORKER_SETS, desired_lws, live_lws)
        if written and live_lws is None:
            self._events.event(obj, "Normal", "Applied", f"Applied LeaderWorkerSet {request.key}")
        await apply_if_changed(self._client, r.SERVICES, desired_lb, live_lb)
        await self._reconcile_policy(request, obj, service, desired_policy, live_policy)
        finding = no_flavor_fits(flavor, models[0], service) if flavor.exhausted else diagnose_pods(pods)
        status = service_status(service, lws, now, finding)
        main, claimed = models[0], claimed_flavors(service)
        missing = missing_flavors(main, claimed)
        with_flavor(service, status, flavor.active, flavor.changed, missing, main.metadata.name or "", now)
        paths = adapter_paths(main, skip_model_loader(service.metadata.annotations))
        failed = unusable_adapters(pods, paths, adapter_loader_envs(main))
        with_adapters(service, status, unavailable_adapters(service, main, failed), main, now)
        if await write_status_if_changed(self._client, r.INFERENCE_SERVICES, obj, status):
            # After the write: a change whose status write failed is decided (and reported) again.
            if flavor.room is not None:
                self._events.event(obj, NORMAL, c.EVENT_FLAVOR_RETURN, return_message(flavor))
            elif flavor.changed:
                self._events.event(obj, WARNING, c.EVENT_FLAVOR_FALLBACK, fallback_message(flavor, now))
            record_new_finding(self._events, obj, status)
            record_left_out_adapters(self._events, obj, status)
        return Result(requeue_after=flavor.requeue_after)

    async def _reconcile_policy(
        self, request: Request, obj: Obj, service: Service, desired: Obj | None, live: Obj | None
    ) -> None:
        """Apply the NetworkPolicy asked for (a policy in the way was refused before), or delete the one this Service
        controls when none is asked for; a policy it does not control is never touched."""
        if desired is not None:
            _, written = await apply_if_changed(self._client, r.NETWORK_POLICIES, desired, live)
            if written and live is None:
                self._events.event(obj, NORMAL, "Applied", f"Applied NetworkPolicy {request.key}")
            return
        if live is None or not is_controlled_by(live, service.metadata.uid):
            return
        uid = str((live.get("metadata") or {}).get("uid", ""))
        try:
            await self._client.delete(r.NETWORK_POLICIES, request.name, request.namespace, preconditions={"uid": uid})
        except NotFound:
            return
        self._events.event(obj, NORMAL, "Deleted", f"Deleted NetworkPolicy {request.key}")

    def _return_if_room(
        self, service: Service, main: OpenModel, decision: FlavorDecision, candidates: list[str], fallback_after: float
    ) -> FlavorDecision:
        """`decision`, or a move back to the best of `candidates` whose nodes have room for every pod now."""
        if not self._capacity.synced():
            return replace(decision, requeue_after=_sooner(decision.requeue_after, CAPACITY_SYNC_RECHECK))
        tolerations = template_tolerations(service)

        def room_for(flavor: Flavor) -> Room:
            return self._capacity.room(flavor_request(flavor), flavor.node_selector, tolerations)

        return return_if_room(decision, main, candidates, pods_per_service(service), fallback_after, room_for)

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

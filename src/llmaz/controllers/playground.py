"""The Playground reconciler: Playground -> inference Service (+ HPA), and the Playground's status.

One reconcile (llmaz's algorithm, with its defects fixed):
1. Read the Playground from the cache; gone -> done (garbage collection removes what it owned). It may also
   vanish during the reconcile: a NotFound for the Playground itself (or its namespace) is success too.
2. Run the admission rules (`validate_playground`, as on create): a Playground stored without admission that the
   webhook would deny -> `Progressing=False`/`AbortProcessing` with the webhook's text, a Warning Event, no
   children, and no retry until it changes.
3. A Service of the same name that this Playground does not control -> `Progressing=False` "Playground owns the
   same name with an existing Service", followed by who controls it, and a rate-limited retry; the Service
   watch (by name) also wakes us when it is deleted or changes controller.
4. Fetch the claimed OpenModels and the BackendRuntime from the cache; a missing one, or inputs the builders
   reject (unknown configName, bad placeholder), -> `Progressing=False`/`AbortProcessing` naming it, and wait:
   the OpenModel and BackendRuntime watches wake exactly the Playgrounds that use them.
5. An HPA of the same name that this Playground does not control, while one is wanted -> the same as 3.
6. Apply the desired Service and HPA (only when they differ from the live objects); delete an HPA we own that is
   no longer wanted. The Service carries the global `scheduler-name` from its creation on (or the name it already
   has), so the Service controller has no name to persist with a second write. An `Applied` Event marks the
   Service's creation; updates are seen in the Service itself, and N Playgrounds changed cost no N Events.
7. The InferencePool (`controllers.pools`), for a Playground that asks for one with `llmaz.io/inference-pool:
   "true"`: while the cluster does not serve InferencePools, `InferencePool=False`/`InferencePoolCRDMissing` and
   one Warning Event, and nothing else (the CRD watch wakes it when the CRD comes); a pool of its name it does not
   control -> `InferencePool=False`/`InferencePoolConflict`, left alone, and a rate-limited retry (the pool watch
   also wakes it); else the pool is applied (when it differs) and `InferencePool=True`. A Playground that no longer
   asks deletes the pool it controls and drops the condition. Only reached when the steps above succeeded.
8. Compute the status from the Service as it now is (including why its pods are not ready, mirrored from the
   Service's `Progressing` message), and whether llmaz-gateway routes the Playground's model to it
   (`ModelRouted=False`/`ModelNameTaken` while another namespace owns the model name, by the rule the gateway
   routes by: `llmaz.apis.serving.model_name_taken` over every Playground and inference Service serving the model,
   found through the `SERVED_MODEL` index), and write it when it changed; a new finding, and a model name newly
   taken, are also Warning Events.
"""

from __future__ import annotations

import contextlib

from llmaz.apis import Playground, Service
from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.pools import wants_pool
from llmaz.apis.serving import main_model, model_name_taken
from llmaz.apis.validation import FieldError, validate_playground
from llmaz.controllers import indexes as ix
from llmaz.controllers.builders import (
    BackendRuntimeNotFoundError,
    BuildError,
    ChildConflictError,
    backend_name,
    build_hpa,
    build_inference_pool,
    build_service,
    kind_label,
    ownership_conflict,
    playground_model_refs,
    playground_status,
    service_scheduler_name,
)
from llmaz.controllers.builders.adapters import left_out_adapters
from llmaz.controllers.builders.status import FALSE, TRUE, PoolCondition, with_inference_pool, with_model_routing
from llmaz.controllers.common import (
    ParentReconciler,
    apply_if_changed,
    fetch_models,
    is_controlled_by,
    live_child,
    parse_backend_runtime,
    record_inference_pool,
    record_left_out_adapters,
    record_model_routing,
    record_new_finding,
    write_status_if_changed,
)
from llmaz.controllers.pools import InferencePools
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.cache import Obj
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import Client, NotFound
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import NORMAL, EventRecorder
from llmaz.runtime.rbac import allow

RBAC_RULES = (
    allow(r.PLAYGROUNDS, "update", subresource="status"),
    # Where the API server enforces owner-reference permissions (OwnerReferencesPermissionEnforcement, on in
    # OpenShift), an owner reference with blockOwnerDeletion needs `update` on the owner's finalizers.
    allow(r.PLAYGROUNDS, "update", subresource="finalizers"),
    # Server-side apply creates or patches; `delete` covers re-pointing the owner reference of a leftover Service
    # or HPA (one a deleted Playground of the same name owned) at a re-created Playground (builders/ownership.py),
    # and removing an HPA that is no longer wanted.
    allow(r.INFERENCE_SERVICES, "create", "patch", "delete"),
    allow(r.HORIZONTAL_POD_AUTOSCALERS, "create", "patch", "delete"),
    # The InferencePools of the Playgrounds that ask for one: cached (llmaz's, by label) once their CRD is served,
    # read directly when one of the name is not in the cache, and deleted when no longer asked for.
    allow(r.INFERENCE_POOLS, "get", "list", "watch", "create", "patch", "delete"),
)


_SERVICE_KIND = kind_label(Service.GROUP, Service.KIND)
_POOL_KIND = r.INFERENCE_POOLS.kind


class PlaygroundReconciler(ParentReconciler[Playground]):
    resource = r.PLAYGROUNDS
    model = Playground

    def __init__(
        self,
        client: Client,
        informers: SharedInformerFactory,
        events: EventRecorder,
        clock: Clock,
        settings: SettingsHolder | None = None,
        *,
        pools: InferencePools | None = None,
    ) -> None:
        """`pools`: the InferencePools (None: the Playgrounds' pool annotations are not acted on)."""
        self._pools = pools
        super().__init__(client, informers, events, clock, settings)

    def watch(self, informers: SharedInformerFactory) -> None:
        self._services = informers.informer_for(r.INFERENCE_SERVICES).store
        self._backends = informers.informer_for(r.BACKEND_RUNTIMES).store
        self._hpas = informers.informer_for(r.HORIZONTAL_POD_AUTOSCALERS).store

    def validate(self, playground: Playground) -> list[FieldError]:
        return validate_playground(playground, creating=True)

    async def converge(self, request: Request, obj: Obj, playground: Playground) -> Result:
        service = self._services.get(request.key)
        conflict = ownership_conflict(playground, _SERVICE_KIND, service)
        if conflict is not None:
            await self.abort(obj, playground, ChildConflictError(playground, [conflict], c.MESSAGE_SERVICE_CONFLICT))
            return Result(requeue=True)  # also woken by the Service watch, which maps by name
        try:
            desired_service, desired_hpa = self._desired(playground, service)
        except BuildError as err:
            await self.abort(obj, playground, err)
            return Result()
        live_hpa = self._hpas.get(request.key)
        conflict = None
        if desired_hpa is not None:
            hpas = r.HORIZONTAL_POD_AUTOSCALERS
            live_hpa = await live_child(self._client, self._hpas, hpas, request.namespace, request.name)
            conflict = ownership_conflict(playground, hpas.kind, live_hpa)
        if conflict is not None:
            await self.abort(obj, playground, ChildConflictError(playground, [conflict]))
            return Result(requeue=True)  # also woken by the HPA watch, which maps by name
        created = service is None
        service, written = await apply_if_changed(self._client, r.INFERENCE_SERVICES, desired_service, service)
        if written and created:
            self._events.event(obj, "Normal", "Applied", f"Applied inference Service {request.key}")
        await self._reconcile_hpa(request, playground, desired_hpa, live_hpa)
        pool, pool_blocked = await self._reconcile_pool(request, obj, playground)
        now = self._clock.wall()
        status = playground_status(playground, Service.from_dict(service), now)
        model = main_model(obj)
        if model is not None:
            with_model_routing(playground, status, model, self._model_name_taken(request.namespace, model), now)
        with_inference_pool(playground, status, pool, now)
        if await write_status_if_changed(self._client, r.PLAYGROUNDS, obj, status):
            record_new_finding(self._events, obj, status)
            record_left_out_adapters(self._events, obj, status)
            record_model_routing(self._events, obj, status)
            record_inference_pool(self._events, obj, status)
        # Blocked by someone else's pool: retried with backoff (a pool without llmaz's label is not watched).
        return Result(requeue=pool_blocked)

    def _model_name_taken(self, namespace: str, model: str) -> bool:
        """Whether another namespace owns `model`'s name, so that llmaz-gateway routes none of its requests here."""
        claimants = [*self._parents.by_index(ix.SERVED_MODEL, model), *self._services.by_index(ix.SERVED_MODEL, model)]
        return model_name_taken(namespace, claimants, self._models.get(model))

    def _desired(self, playground: Playground, live_service: Obj | None) -> tuple[Obj, Obj | None]:
        models = fetch_models(self._models, playground_model_refs(playground))
        backend_obj = self._backends.get(backend_name(playground))
        if backend_obj is None:
            raise BackendRuntimeNotFoundError(backend_name(playground))
        backend = parse_backend_runtime(backend_obj)
        # Until the global config has loaded the Service controller persists the name itself, as before.
        configured = settings.scheduler_name if (settings := self._settings.current) is not None else ""
        scheduler = service_scheduler_name(live_service, configured)
        left_out = left_out_adapters(Service.from_dict(live_service) if live_service else None, models[0])
        return build_service(playground, models, backend, scheduler, left_out), build_hpa(playground, backend)

    async def _reconcile_hpa(
        self, request: Request, playground: Playground, desired: Obj | None, live: Obj | None
    ) -> None:
        if desired is not None:
            await apply_if_changed(self._client, r.HORIZONTAL_POD_AUTOSCALERS, desired, live)
        elif live is not None and is_controlled_by(live, playground.metadata.uid):
            # llmaz left the HPA behind when elasticConfig was removed, and it kept scaling the Playground.
            uid = str((live.get("metadata") or {}).get("uid", ""))
            with contextlib.suppress(NotFound):
                await self._client.delete(
                    r.HORIZONTAL_POD_AUTOSCALERS, request.name, request.namespace, preconditions={"uid": uid}
                )

    async def _reconcile_pool(
        self, request: Request, obj: Obj, playground: Playground
    ) -> tuple[PoolCondition | None, bool]:
        """Converge the Playground's InferencePool; returns its condition (None: it asks for none) and whether a
        pool it does not control stands in the way."""
        if self._pools is None:
            return None, False
        wanted = wants_pool(playground.metadata.annotations)
        store = self._pools.store()
        if store is None:
            if not wanted:
                return None, False
            missing = PoolCondition(FALSE, c.REASON_INFERENCE_POOL_CRD_MISSING, c.MESSAGE_INFERENCE_POOL_CRD_MISSING)
            return missing, False
        pools = r.INFERENCE_POOLS
        if not wanted:
            live = store.get(request.key)
            if live is not None and is_controlled_by(live, playground.metadata.uid):
                uid = str((live.get("metadata") or {}).get("uid", ""))
                try:
                    await self._client.delete(pools, request.name, request.namespace, preconditions={"uid": uid})
                except NotFound:
                    return None, False
                self._events.event(obj, NORMAL, "Deleted", f"Deleted InferencePool {request.key}")
            return None, False
        live = await live_child(self._client, store, pools, request.namespace, request.name)
        conflict = ownership_conflict(playground, _POOL_KIND, live)
        if conflict is not None:
            message = c.MESSAGE_INFERENCE_POOL_CONFLICT.format(
                conflict=conflict.message, annotation=c.INFERENCE_POOL_ANNOTATION
            )
            return PoolCondition(FALSE, c.REASON_INFERENCE_POOL_CONFLICT, message), True
        desired = build_inference_pool(playground)
        _, written = await apply_if_changed(self._client, pools, desired, live)
        if written and live is None:
            self._events.event(obj, NORMAL, "Applied", f"Applied InferencePool {request.key}")
        picker = desired["spec"]["endpointPickerRef"]
        message = c.MESSAGE_INFERENCE_POOL_APPLIED.format(
            name=request.name, epp=picker["name"], port=picker["port"]["number"]
        )
        return PoolCondition(TRUE, c.REASON_INFERENCE_POOL_APPLIED, message), False

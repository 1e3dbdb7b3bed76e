"""The Playground reconciler: Playground -> inference Service (+ HPA), and the Playground's status.

One reconcile (llmaz's algorithm, with its defects fixed):
1. Read the Playground from the cache; gone -> done (garbage collection removes what it owned). It may also
   vanish during the reconcile: a NotFound for the Playground itself (or its namespace) is success too.
2. A Service of the same name that this Playground does not control -> `Progressing=False` "Playground owns the
   same name with an existing Service", and wait: the Service watch wakes us when it is deleted.
3. Fetch the claimed OpenModels and the BackendRuntime from the cache; a missing one, or inputs the builders
   reject (unknown configName, bad placeholder), -> `Progressing=False`/`AbortProcessing` naming it, and wait:
   the OpenModel and BackendRuntime watches wake exactly the Playgrounds that use them.
4. Apply the desired Service and HPA (only when they differ from the live objects); delete an HPA we own that is
   no longer wanted.
5. Compute the status from the Service as it now is (including why its pods are not ready, mirrored from the
   Service's `Progressing` message) and write it when it changed; a new finding is also a Warning Event.
"""

from __future__ import annotations

import contextlib

from llmaz.apis import Playground, Service
from llmaz.apis import constants as c
from llmaz.controllers import resources as r
from llmaz.controllers.builders import (
    BackendRuntimeNotFoundError,
    BuildError,
    abort_status,
    backend_name,
    build_hpa,
    build_service,
    playground_model_refs,
    playground_status,
)
from llmaz.controllers.common import (
    apply_if_changed,
    fetch_models,
    is_controlled_by,
    parse_backend_runtime,
    parse_cached,
    record_new_finding,
    unless_deleted,
    write_status_if_changed,
)
from llmaz.runtime.cache import Obj
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.client import Client, NotFound
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import EventRecorder
from llmaz.runtime.rbac import allow

RBAC_RULES = (
    allow(r.PLAYGROUNDS, "update", subresource="status"),
    # Where the API server enforces owner-reference permissions (OwnerReferencesPermissionEnforcement, on in
    # OpenShift), an owner reference with blockOwnerDeletion needs `update` on the owner's finalizers.
    allow(r.PLAYGROUNDS, "update", subresource="finalizers"),
    allow(r.INFERENCE_SERVICES, "create", "patch"),  # server-side apply creates or patches
    # `delete` also covers re-pointing the owner reference of a leftover HPA at a re-created Playground.
    allow(r.HORIZONTAL_POD_AUTOSCALERS, "create", "patch", "delete"),
)


class PlaygroundReconciler:
    def __init__(self, client: Client, informers: SharedInformerFactory, events: EventRecorder, clock: Clock) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self._playgrounds = informers.informer_for(r.PLAYGROUNDS).store
        self._services = informers.informer_for(r.INFERENCE_SERVICES).store
        self._models = informers.informer_for(r.OPEN_MODELS).store
        self._backends = informers.informer_for(r.BACKEND_RUNTIMES).store
        self._hpas = informers.informer_for(r.HORIZONTAL_POD_AUTOSCALERS).store

    async def reconcile(self, request: Request) -> Result:
        return await unless_deleted(r.PLAYGROUNDS, request, self._reconcile)

    async def _reconcile(self, request: Request) -> Result:
        obj = self._playgrounds.get(request.key)
        if obj is None:
            return Result()
        playground = parse_cached(Playground, obj, request.key)
        service = self._services.get(request.key)
        if service is not None and not is_controlled_by(service, playground.metadata.uid):
            await self._abort(obj, playground, c.MESSAGE_SERVICE_CONFLICT, "ServiceConflict")
            return Result()
        try:
            desired_service, desired_hpa = self._desired(playground)
        except BuildError as err:
            # The event reason names the cause: ModelNotFound, BackendRuntimeNotFound, ArgRender, ...
            await self._abort(obj, playground, err.message, type(err).__name__.removesuffix("Error"))
            return Result()
        service, written = await apply_if_changed(self._client, r.INFERENCE_SERVICES, desired_service, service)
        if written:
            self._events.event(obj, "Normal", "Applied", f"Applied inference Service {request.key}")
        await self._reconcile_hpa(request, playground, desired_hpa)
        status = playground_status(playground, Service.from_dict(service), self._clock.wall())
        if await write_status_if_changed(self._client, r.PLAYGROUNDS, obj, status):
            record_new_finding(self._events, obj, status)
        return Result()

    def _desired(self, playground: Playground) -> tuple[Obj, Obj | None]:
        models = fetch_models(self._models, playground_model_refs(playground))
        backend_obj = self._backends.get(backend_name(playground))
        if backend_obj is None:
            raise BackendRuntimeNotFoundError(backend_name(playground))
        backend = parse_backend_runtime(backend_obj)
        return build_service(playground, models, backend), build_hpa(playground, backend)

    async def _reconcile_hpa(self, request: Request, playground: Playground, desired: Obj | None) -> None:
        live = self._hpas.get(request.key)
        if desired is not None:
            await apply_if_changed(self._client, r.HORIZONTAL_POD_AUTOSCALERS, desired, live)
        elif live is not None and is_controlled_by(live, playground.metadata.uid):
            # llmaz left the HPA behind when elasticConfig was removed, and it kept scaling the Playground.
            uid = str((live.get("metadata") or {}).get("uid", ""))
            with contextlib.suppress(NotFound):
                await self._client.delete(
                    r.HORIZONTAL_POD_AUTOSCALERS, request.name, request.namespace, preconditions={"uid": uid}
                )

    async def _abort(self, obj: Obj, playground: Playground, message: str, reason: str) -> None:
        status = abort_status(playground, message, self._clock.wall())
        if await write_status_if_changed(self._client, r.PLAYGROUNDS, obj, status):
            self._events.event(obj, "Warning", reason, message)

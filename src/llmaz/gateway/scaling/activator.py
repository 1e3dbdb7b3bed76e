"""The `-lb` activator: keeps, for every sleeping opted-in Playground, an EndpointSlice that sends its own Service
to the gateway's activator port (`activation` decides which slice; this module writes it).

A controller on the runtime's controller machinery, keyed per Playground, which every gateway replica runs (no
leader election). It is level-triggered: a reconcile compares what `activation.desired_slice` wants for one
Playground with the cached slices and writes only the difference. A Playground's key is queued by its own events,
those of its `-lb` Service and of that Service's EndpointSlices (the engine's and the activator's), those of the
other Playgrounds claiming its model and of that model's OpenModel (which namespace the model is routed to, hence
whether a slice is wanted, follows them), and every key by an EndpointSlice event of the gateway's own Service (its
pods changing during a rollout).

Invariants:
- A slice is created with a plain create, so of many replicas racing exactly one succeeds (the others get
  AlreadyExists and do nothing); it is deleted with the cached uid as a precondition, so exactly one deletion
  succeeds. Only that replica records the `ActivatorEnabled` / `ActivatorRemoved` Event: one per transition.
- An update re-reads the live slice and writes it with its resourceVersion, through `retry_on_conflict`; a
  live slice without the activator's managed-by label is never written, and none is ever deleted
  (`activation.Action.FOREIGN`, one Warning Event per slice). The cache holds only slices labelled as llmaz's or
  the activator's, so someone else's slice of the activator's name shows up when the create is refused: it is
  read then, and warned about.
- The activator's slices of a `-lb` Service whose Playground is gone, or not named after it, are deleted.
- With the activator disabled (port 0) a reconcile only deletes the slices the activator left behind.
- A failed write is logged with the slice's key and the Playground's key is retried with the controller's
  backoff.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmaz.apis.resources import ENDPOINT_SLICES
from llmaz.apis.serving import LB_SERVICE_SUFFIX, lb_service_name, main_model
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.scaling import activation
from llmaz.gateway.scaling.activation import Action
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client, retry_on_conflict
from llmaz.runtime.client.errors import ApiError, is_conflict, is_not_found
from llmaz.runtime.controller import (
    Controller,
    ControllerOptions,
    Predicate,
    Request,
    Result,
    Watch,
    enqueue_for_object,
)
from llmaz.runtime.events import NORMAL, WARNING, EventRecorder
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import object_key

RBAC_RULES = (allow(ENDPOINT_SLICES, "create", "update", "delete"),)
DEFAULT_PORT = 8001


@dataclass(frozen=True, slots=True)
class ActivatorOptions:
    port: int = DEFAULT_PORT
    """The activator listener's port, which the slices name; 0 disables the activator. Default 8001."""
    gateway_service: str = "llmaz-system/llmaz-gateway"
    """"namespace/name" of the gateway's own Service, whose ready pods the slices list."""


class Activator:
    """The activator's reconciler, one Playground key at a time (see the module docstring)."""

    def __init__(
        self, client: Client, catalog: Catalog, recorder: EventRecorder, options: ActivatorOptions | None = None
    ) -> None:
        self._client = client
        self._catalog = catalog
        self._recorder = recorder
        self.options = options or ActivatorOptions()
        self._warned: set[str] = set()
        self._log = get_logger("llmaz.gateway.activator")

    async def reconcile(self, request: Request) -> Result:
        """Converge the activator slices of one Playground's `-lb` Service; a failed write is retried."""
        namespace, name = request.namespace, request.name
        playground = self._catalog.playground(namespace, name)
        lb = lb_service_name(name)
        lb_slices = self._catalog.slices_of(namespace, lb)
        wanted = activation.slice_name(name)
        ok = True
        if playground is not None:
            gateway_namespace, _, gateway_name = self.options.gateway_service.partition("/")
            desired = activation.desired_slice(
                playground,
                self._catalog.core_service(namespace, lb),
                lb_slices,
                self._catalog.slices_of(gateway_namespace, gateway_name),
                self.options.port,
                self._catalog.routed(playground),
            )
            ok = await self._converge(playground, desired, self._catalog.endpoint_slice(namespace, wanted))
        for stray in lb_slices:
            if routes.is_activator_slice(stray) and (playground is None or stray["metadata"]["name"] != wanted):
                ok &= await self._delete(stray, None, "no Playground wants it")
        return Result(requeue=not ok)

    async def _converge(self, playground: Obj, desired: activation.Desired, existing: Obj | None) -> bool:
        action = activation.plan(desired.slice, existing)
        if action is Action.CREATE and desired.slice is not None:
            return await self._create(playground, desired.slice)
        if action is Action.UPDATE and desired.slice is not None:
            return await self._update(desired.slice)
        if action is Action.DELETE and existing is not None:
            reason = desired.reason if desired.slice is None else "its address type changed: it is made anew"
            return await self._delete(existing, playground, reason)
        if action is Action.FOREIGN and existing is not None and desired.slice is not None:
            self._warn_foreign(playground, existing)
        return True

    async def _create(self, playground: Obj, desired: Obj) -> bool:
        key, count = object_key(desired), len(desired["endpoints"])
        try:
            await self._client.create(ENDPOINT_SLICES, desired)
        except ApiError as err:
            if err.status == 409:  # AlreadyExists: another replica created it, or someone else has the name
                await self._warn_if_foreign(playground, desired)
                return True
            self._log.error("cannot create the activator slice", endpointslice=key, error=str(err))
            return False
        port = desired["ports"][0]
        self._log.info("activator slice created", endpointslice=key, addresses=count, port=port["port"])
        self._recorder.event(
            playground,
            NORMAL,
            "ActivatorEnabled",
            f"Created EndpointSlice {desired['metadata']['name']} with {count} llmaz-gateway address(es) on port "
            f"{port['port']} ({port['name'] or 'unnamed'}): direct requests to "
            f"{desired['metadata']['labels'][routes.SERVICE_NAME_LABEL]} are held while the model wakes",
        )
        return True

    async def _update(self, desired: Obj) -> bool:
        meta = desired["metadata"]
        key = object_key(desired)

        async def write() -> None:
            live = await self._client.get(ENDPOINT_SLICES, meta["name"], meta["namespace"])
            if not routes.is_activator_slice(live):
                return  # taken by someone else since the cache saw it: never written
            if activation.same_content(live, desired):
                return
            live["ports"], live["endpoints"] = desired["ports"], desired["endpoints"]
            await self._client.update(ENDPOINT_SLICES, live)
            self._log.info("activator slice updated", endpointslice=key, addresses=activation.addresses(desired))

        try:
            await retry_on_conflict(write)
        except ApiError as err:
            if is_not_found(err):
                return True  # deleted meanwhile: the next pass creates it again if it is still wanted
            self._log.error("cannot update the activator slice", endpointslice=key, error=str(err))
            return False
        return True

    async def _delete(self, existing: Obj, playground: Obj | None, reason: str) -> bool:
        meta = existing["metadata"]
        key = object_key(existing)
        preconditions = {"uid": meta["uid"]} if meta.get("uid") else None
        try:
            await self._client.delete(ENDPOINT_SLICES, meta["name"], meta["namespace"], preconditions=preconditions)
        except ApiError as err:
            if is_not_found(err) or is_conflict(err):  # another replica deleted it first (or it was replaced)
                return True
            self._log.error("cannot delete the activator slice", endpointslice=key, error=str(err))
            return False
        self._log.info("activator slice deleted", endpointslice=key, reason=reason)
        if playground is not None:
            self._recorder.event(
                playground, NORMAL, "ActivatorRemoved", f"Deleted EndpointSlice {meta['name']}: {reason}"
            )
        return True

    async def _warn_if_foreign(self, playground: Obj, desired: Obj) -> None:
        meta = desired["metadata"]
        try:
            live = await self._client.get(ENDPOINT_SLICES, meta["name"], meta["namespace"])
        except ApiError:
            return  # gone again, or unreadable: the next reconcile of the key looks again
        if not routes.is_activator_slice(live):
            self._warn_foreign(playground, live)

    def _warn_foreign(self, playground: Obj, existing: Obj) -> None:
        key = object_key(existing)
        if key in self._warned:
            return
        self._warned.add(key)
        self._log.warning("an EndpointSlice not managed by the activator has its name", endpointslice=key)
        self._recorder.event(
            playground,
            WARNING,
            "ActivatorBlocked",
            f"EndpointSlice {existing['metadata']['name']} exists and is not managed by "
            f"{routes.ACTIVATOR_MANAGED_BY}: it is left alone, and direct requests are not held while the model wakes",
        )


def activator_controller(activator: Activator, catalog: Catalog) -> Controller:
    """The activator as a controller over the catalog's informers (see the module docstring for what queues what)."""
    gateway = activator.options.gateway_service

    def playgrounds_of_slice(obj: Obj) -> list[Request]:
        meta = obj.get("metadata") or {}
        namespace, service = meta.get("namespace") or "", (meta.get("labels") or {}).get(routes.SERVICE_NAME_LABEL)
        if not isinstance(service, str):
            return []
        if f"{namespace}/{service}" == gateway:
            return [Request(pg["metadata"]["namespace"], pg["metadata"]["name"]) for pg in catalog.playgrounds()]
        return _playground_of_lb(namespace, service)

    def playground_of_service(obj: Obj) -> list[Request]:
        meta = obj.get("metadata") or {}
        return _playground_of_lb(meta.get("namespace") or "", str(meta.get("name") or ""))

    def claimants(model: str | None) -> list[Request]:
        found = catalog.playgrounds_claiming(model) if model else []
        return [Request(pg["metadata"]["namespace"], pg["metadata"]["name"]) for pg in found]

    def claimants_of_model(obj: Obj) -> list[Request]:
        return claimants(main_model(obj))

    def claimants_of_open_model(obj: Obj) -> list[Request]:
        return claimants((obj.get("metadata") or {}).get("name"))

    # Which Playground a model is routed to changes with its other claimants and its OpenModel's opt-in.
    claims_changed = Predicate(update=lambda old, new: main_model(old) != main_model(new))
    watches = [
        Watch(catalog.playground_informer, enqueue_for_object(), source="playgrounds"),
        Watch(catalog.playground_informer, claimants_of_model, (claims_changed,), source="playgrounds"),
        Watch(catalog.open_model_informer, claimants_of_open_model, source="openmodels"),
    ]
    watches += [Watch(informer, playgrounds_of_slice, source="endpointslices") for informer in catalog.slice_informers]
    if catalog.core_service_informer is not None:
        watches.append(Watch(catalog.core_service_informer, playground_of_service, source="services"))
    return Controller("gateway-activator", activator, watches, ControllerOptions(needs_leader_election=False))


def _playground_of_lb(namespace: str, service: str) -> list[Request]:
    """The Playground whose `-lb` Service `service` is (none for another Service)."""
    name = service.removesuffix(LB_SERVICE_SUFFIX)
    return [Request(namespace, name)] if name != service and name else []

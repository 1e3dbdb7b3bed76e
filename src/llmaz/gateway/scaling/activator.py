"""The `-lb` activator loop: keeps, for every sleeping opted-in Playground, an EndpointSlice that sends its own
Service to the gateway's activator port (`activation` decides which slice; this module writes it).

Every gateway replica runs this loop (no leader election). It is level-triggered: a pass compares what
`activation.desired_slice` wants for every Playground with the cached slices and writes only the difference;
a pass runs after any Playground, EndpointSlice or core Service event (the gateway's own pods changing during a
rollout is an EndpointSlice event of its Service), and every `resync_interval` anyway.

Invariants:
- A slice is created with a plain create, so of many replicas racing exactly one succeeds (the others get
  AlreadyExists and do nothing); it is deleted with the cached uid as a precondition, so exactly one deletion
  succeeds. Only that replica records the `ActivatorEnabled` / `ActivatorRemoved` Event: one per transition.
- An update re-reads the live slice and writes it with its resourceVersion, through `retry_on_conflict`; a
  live slice without the activator's managed-by label is never written, and none is ever deleted
  (`activation.Action.FOREIGN`, one Warning Event per slice).
- With the activator disabled (port 0) a pass only deletes the slices the activator left behind.
- A failed write is logged with the slice's key and retried by the next pass, at most `retry_interval` later.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from llmaz.apis.resources import ENDPOINT_SLICES
from llmaz.apis.serving import lb_service_name
from llmaz.gateway.routing import routes
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.scaling import activation
from llmaz.gateway.scaling.activation import Action
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client, retry_on_conflict
from llmaz.runtime.client.errors import ApiError, is_conflict, is_not_found
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
    resync_interval: float = 30.0
    """Seconds between passes when nothing changes. Default 30."""
    retry_interval: float = 5.0
    """Seconds before the next pass after a failed write. Default 5."""


class Activator:
    """A Runnable: the activator loop (see the module docstring)."""

    needs_leader_election = False

    def __init__(
        self, client: Client, catalog: Catalog, recorder: EventRecorder, options: ActivatorOptions | None = None
    ) -> None:
        self._client = client
        self._catalog = catalog
        self._recorder = recorder
        self.options = options or ActivatorOptions()
        self._dirty = asyncio.Event()
        self._warned: set[str] = set()
        self.passes = 0
        self._log = get_logger("llmaz.gateway.activator")
        catalog.add_listener(self._dirty.set)

    async def run(self, stopping: asyncio.Event) -> None:
        self._log.info("activator running", port=self.options.port, gateway_service=self.options.gateway_service)
        while not stopping.is_set():
            wait = self.options.resync_interval
            if self._catalog.has_synced():
                self._dirty.clear()
                try:
                    if not await self.reconcile():
                        wait = self.options.retry_interval
                except Exception:
                    self._log.exception("activator pass failed")
                    wait = self.options.retry_interval
            await _first(stopping, self._dirty, wait)

    async def reconcile(self) -> bool:
        """One pass over every Playground and every slice of the activator; False when a write failed."""
        self.passes += 1
        ok = True
        wanted: set[str] = set()
        namespace, _, name = self.options.gateway_service.partition("/")
        gateway_slices = self._catalog.slices_of(namespace, name)
        for playground in self._catalog.playgrounds():
            pg_namespace, pg_name = playground["metadata"]["namespace"], playground["metadata"]["name"]
            lb = lb_service_name(pg_name)
            desired = activation.desired_slice(
                playground,
                self._catalog.core_service(pg_namespace, lb),
                self._catalog.slices_of(pg_namespace, lb),
                gateway_slices,
                self.options.port,
            )
            wanted.add(f"{pg_namespace}/{activation.slice_name(pg_name)}")
            existing = self._catalog.endpoint_slice(pg_namespace, activation.slice_name(pg_name))
            ok &= await self._converge(playground, desired, existing)
        for stray in self._catalog.activator_slices():
            if object_key(stray) not in wanted:  # its Playground is gone, or it is not named after one
                ok &= await self._delete(stray, None, "no Playground wants it")
        return ok

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
            if err.status == 409:  # AlreadyExists: another replica created it (or a foreign one appeared)
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


async def _first(stopping: asyncio.Event, dirty: asyncio.Event, within: float) -> None:
    """Return when `stopping` or `dirty` is set, or after `within` seconds."""
    waiters = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(dirty.wait())]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter

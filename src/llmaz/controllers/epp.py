"""The endpoint picker in every namespace holding llmaz InferencePools: the Service `llmaz-epp` and its mirrored
EndpointSlice (`builders.epp`), kept while the namespace needs them and removed when it no longer does.

An InferencePool's `endpointPickerRef` names a Service of the pool's own namespace; llmaz's picker runs in
llmaz-gateway's pods, behind `llmaz-gateway-epp` in the gateway's namespace (the manager's: config/default puts
both in llmaz-system). A namespace needs the mirror while the InferencePool CRD is served and one of its Playgrounds
asks for a pool (`llmaz.io/inference-pool: "true"`): exactly when the Playground controller keeps a pool there.
Deciding from the Playgrounds (always cached) rather than the pools (cached only once their CRD is served, in a
factory of their own) keeps this controller's caches in the manager's start-up sync like every other.

One reconcile per namespace (the key `<namespace>/llmaz-epp`):
- needed: apply the Service and the slice (each only when it differs), the slice listing the ready endpoints of
  the gateway's picker slices. A Service or slice of that name without llmaz's managed-by label is someone else's:
  left alone, logged, and retried with backoff.
- not needed: delete the Service and slice that carry llmaz's label (uid precondition).

Woken by: a Playground created, deleted, or changing whether it asks for a pool (its namespace); the InferencePool
CRD (every namespace with a Playground asking); the gateway's picker slices (the same namespaces, and those
holding a mirror); the mirrored Service or slice itself (its namespace), so an edit or deletion is undone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.pools import wants_pool
from llmaz.controllers.builders.epp import (
    EPP_MIRROR_MANAGED_BY,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY_LABEL,
    build_epp_service,
    build_epp_slice,
)
from llmaz.controllers.common import apply_if_changed, live_child
from llmaz.controllers.pools import InferencePools
from llmaz.runtime.cache import Obj, SharedInformerFactory, Store
from llmaz.runtime.client import Client, NotFound
from llmaz.runtime.controller import Request, Result, Scope
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource

RBAC_RULES = (
    allow(r.SERVICES, "create", "patch", "delete"),
    allow(r.ENDPOINT_SLICES, "create", "patch", "delete"),
)

MIRROR_SELECTOR = f"{SLICE_MANAGED_BY_LABEL}={EPP_MIRROR_MANAGED_BY}"
_log = get_logger("llmaz.controllers.epp")


def source_selector(service: str) -> str:
    """The label selector of the gateway's picker Service's slices."""
    return f"{SERVICE_NAME_LABEL}={service}"


def _meta(obj: Obj) -> dict[str, object]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _ours(obj: Obj) -> bool:
    labels = _meta(obj).get("labels") or {}
    return isinstance(labels, dict) and labels.get(c.MANAGED_BY_LABEL) == c.MANAGED_BY


def _asks(obj: Obj) -> bool:
    annotations = _meta(obj).get("annotations")
    return wants_pool(annotations if isinstance(annotations, dict) else None)


def asking_changed() -> Predicate:
    """Pass creations, deletions, and updates that change whether a Playground asks for a pool."""
    return Predicate(update=lambda old, new: _asks(old) != _asks(new))


def _key(namespace: str) -> Request:
    return Request(namespace, c.EPP_SERVICE_NAME)


class EppMirror:
    """The reconciler (see the module); `mappers` wire its watches."""

    def __init__(
        self, client: Client, informers: SharedInformerFactory, pools: InferencePools, gateway_namespace: str
    ) -> None:
        self._client = client
        self._pools = pools
        self._playgrounds = informers.informer_for(r.PLAYGROUNDS).store
        self._services = informers.informer_for(r.SERVICES).store
        self.mirror_scope = Scope(label_selector=MIRROR_SELECTOR)
        self.source_scope = Scope(gateway_namespace, label_selector=source_selector(c.GATEWAY_EPP_SERVICE_NAME))
        self._slices = informers.informer_for(r.ENDPOINT_SLICES, label_selector=MIRROR_SELECTOR).store
        self._sources = informers.informer_for(
            r.ENDPOINT_SLICES, gateway_namespace, label_selector=self.source_scope.label_selector
        ).store

    def needed(self, namespace: str) -> bool:
        if not self._pools.served():
            return False
        return any(_meta(pg).get("namespace") == namespace and _asks(pg) for pg in self._playgrounds.list())

    def _asking_namespaces(self) -> list[Request]:
        namespaces = {str(_meta(pg).get("namespace") or "") for pg in self._playgrounds.list() if _asks(pg)}
        mirrored = {str(_meta(s).get("namespace") or "") for s in self._slices.list()}
        return [_key(namespace) for namespace in sorted(namespaces | mirrored)]

    @staticmethod
    def namespace_of(name: str | None = None) -> Callable[[Obj], list[Request]]:
        """A mapper: the object's namespace (of a Playground; of the mirrored Service or slice, named `name`)."""

        def map_namespace(obj: Obj) -> list[Request]:
            meta = _meta(obj)
            if name is not None and meta.get("name") != name:
                return []
            return [_key(str(meta.get("namespace") or ""))]

        return map_namespace

    def every_namespace(self) -> Callable[[Obj], list[Request]]:
        """A mapper: every namespace with a Playground asking for a pool, or holding a mirror."""
        return lambda _obj: self._asking_namespaces()

    async def reconcile(self, request: Request) -> Result:
        namespace = request.namespace
        if not self.needed(namespace):
            for resource, store in ((r.ENDPOINT_SLICES, self._slices), (r.SERVICES, self._services)):
                await self._delete_ours(resource, store, namespace)
            return Result()
        blocked = False
        desired = (
            (r.SERVICES, self._services, build_epp_service(namespace)),
            (r.ENDPOINT_SLICES, self._slices, build_epp_slice(namespace, self._sources.list())),
        )
        for resource, store, obj in desired:
            live = await live_child(self._client, store, resource, namespace, c.EPP_SERVICE_NAME)
            if live is not None and not _ours(live):
                _log.warning(
                    "not taking over an object that llmaz does not manage: the InferencePools of the namespace "
                    "cannot reach the endpoint picker until it is removed",
                    kind=resource.kind,
                    namespace=namespace,
                    name=c.EPP_SERVICE_NAME,
                )
                blocked = True
                continue
            await apply_if_changed(self._client, resource, obj, live)
        return Result(requeue=blocked)

    async def _delete_ours(self, resource: Resource, store: Store, namespace: str) -> None:
        live = store.get(f"{namespace}/{c.EPP_SERVICE_NAME}")
        if live is None or not _ours(live):
            return
        uid = str(_meta(live).get("uid") or "")
        with contextlib.suppress(NotFound):
            await self._client.delete(resource, c.EPP_SERVICE_NAME, namespace, preconditions={"uid": uid})

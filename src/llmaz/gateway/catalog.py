"""The gateway's view of the cluster: four shared informers and the routes computed from them.

What is watched (and so what the gateway's RBAC allows, `RBAC_RULES`): Playgrounds, inference Services and
OpenModels cluster-wide, and the EndpointSlices of every core Service (selected by the `kubernetes.io/service-name`
label the EndpointSlice controller sets). The `-lb` Services llmaz makes carry no label of their own that their
slices would inherit, so the slices cannot be narrowed further on the server; a transform keeps only what
routing reads (`routes.compact_endpoint_slice`) and an index finds a Service's slices by "namespace/name".

Invariants:
- The model -> backends table is rebuilt from the caches on the first lookup after any Playground or Service
  event, so it is never staler than the caches; endpoints are read from the slice cache on every lookup.
- Reads never await, so a lookup sees one consistent state of every cache.
- `changed()` resolves on the next Playground or EndpointSlice event: a request held while its model wakes
  re-reads its endpoints then, instead of polling.
"""

from __future__ import annotations

import asyncio

from llmaz.apis import constants as c
from llmaz.gateway import routes
from llmaz.gateway.routes import Backend, Endpoint
from llmaz.runtime.cache import DeletedFinalStateUnknown, Informer, Obj, SharedInformerFactory
from llmaz.runtime.rbac import READ, allow
from llmaz.runtime.resource import Resource

OPEN_MODELS = Resource(c.CORE_GROUP, c.VERSION, "openmodels", "OpenModel", namespaced=False)
PLAYGROUNDS = Resource(c.INFERENCE_GROUP, c.VERSION, "playgrounds", "Playground", namespaced=True)
INFERENCE_SERVICES = Resource(c.INFERENCE_GROUP, c.VERSION, "services", "Service", namespaced=True)
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)

RBAC_RULES = tuple(allow(r, *READ) for r in (OPEN_MODELS, PLAYGROUNDS, INFERENCE_SERVICES, ENDPOINT_SLICES))

BACKEND_INDEX = "backend"


class _Invalidate:
    """An event handler that marks the route table stale."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.invalidate()

    def on_update(self, old: Obj, new: Obj) -> None:
        if routes.main_model(old) != routes.main_model(new):
            self._catalog.invalidate()

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.invalidate()


class _Notify:
    """An event handler that wakes whoever waits for the next change."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.notify()

    def on_update(self, old: Obj, new: Obj) -> None:
        self._catalog.notify()

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.notify()


class Catalog:
    """Served models and their ready endpoints, read from informers (see the module docstring)."""

    def __init__(
        self, playgrounds: Informer, services: Informer, open_models: Informer, endpoint_slices: Informer
    ) -> None:
        self._informers = (playgrounds, services, open_models, endpoint_slices)
        self._playgrounds = playgrounds
        self._services = services
        self._open_models = open_models
        self._slices = endpoint_slices
        self._slices.add_indexers({BACKEND_INDEX: routes.slice_backend_key})
        self._table: dict[str, tuple[Backend, ...]] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        for informer in (playgrounds, services):
            informer.add_event_handler(_Invalidate(self))
        for informer in (playgrounds, endpoint_slices):
            informer.add_event_handler(_Notify(self))

    @classmethod
    def watch(cls, informers: SharedInformerFactory) -> Catalog:
        """A catalog over the factory's shared informers (call before the factory starts)."""
        slices = informers.informer_for(ENDPOINT_SLICES, label_selector=routes.SERVICE_NAME_LABEL)
        slices.set_transform(routes.compact_endpoint_slice)
        return cls(
            informers.informer_for(PLAYGROUNDS),
            informers.informer_for(INFERENCE_SERVICES),
            informers.informer_for(OPEN_MODELS),
            slices,
        )

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self._informers)

    def invalidate(self) -> None:
        self._table = None

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def changed(self, within: float) -> None:
        """Return at the next Playground or EndpointSlice event, or after `within` seconds."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, within)
        except TimeoutError:
            return
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def playgrounds(self) -> list[Obj]:
        return self._playgrounds.store.list()

    def playgrounds_serving(self, model: str) -> list[Obj]:
        """The Playgrounds whose main model is `model`."""
        return [pg for pg in self._playgrounds.store.list() if routes.main_model(pg) == model]

    def _routes(self) -> dict[str, tuple[Backend, ...]]:
        if self._table is None:
            self._table = routes.route_table(self._playgrounds.store.list(), self._services.store.list())
        return self._table

    def models(self) -> list[str]:
        return sorted(self._routes())

    def serves(self, model: str) -> bool:
        return model in self._routes()

    def endpoints(self, model: str) -> list[Endpoint]:
        """The ready endpoints of every backend serving `model` (empty for an unknown model)."""
        found: set[Endpoint] = set()
        for backend in self._routes().get(model, ()):
            found.update(routes.ready_endpoints(self._slices.store.by_index(BACKEND_INDEX, backend.key)))
        return sorted(found)

    def model_list(self) -> dict[str, object]:
        # OpenModels are cluster-scoped: the cache key is the name.
        return routes.model_list(self._routes(), self._open_models.store.get)

"""The gateway's view of the cluster: shared informers and the routes computed from them.

What is watched (and so what the gateway's RBAC allows, `RBAC_RULES`): Playgrounds, inference Services and
OpenModels cluster-wide; the core Services llmaz made (label `app.kubernetes.io/managed-by: llmaz`, so the `-lb`
ones among them), reduced to their ports and IP families (the activator names its slice's port after the `-lb`
Service's); and EndpointSlices, never the whole cluster's, through three label selectors (the API server has no
"or"): the slices of llmaz's core Services (the EndpointSlice controller copies a Service's labels onto its
slices, so they carry `app.kubernetes.io/managed-by: llmaz` too), the activator's own slices
(`endpointslice.kubernetes.io/managed-by: llmaz-gateway.llmaz.io`), and the slices of the gateway's own Service
(its `kubernetes.io/service-name`, in its namespace). A transform keeps only what routing and the activator read
(`routes.compact_endpoint_slice`), and an index finds a Service's slices by "namespace/name" in any of them.

Invariants:
- The model -> backends table is rebuilt from the caches on the first lookup after any Playground or Service
  event, and after an OpenModel's creation, deletion or change of `llmaz.io/serve-across-namespaces`, so it is
  never staler than the caches; endpoints are read from the slice cache on every lookup.
- A model is routed only to the backends of the namespaces tenancy allows (`routes.route_table`): every answer
  below, `playgrounds_serving` (what scale from zero wakes) included, sees only those.
- Reads never await, so a lookup sees one consistent state of every cache.
- `await_endpoints(model, deadline, select)` re-reads a model's endpoints on each event of that model: a Playground
  or inference Service serving it (before or after the event), an EndpointSlice or core Service of one of its
  `-lb` Services, and `notify_endpoint` of one of its endpoints (the engine signals call it when an endpoint's
  adapters change); never by polling, and never for another model's events: a request held while its model gets
  a replica, or a replica holding its adapter, waits there, and a thousand held requests of one model are not
  woken by every event of the cluster.
- The adapter table (adapter name -> its base model, `adapters`) is rebuilt with the model table, and on any
  OpenModel event that changes a model's adapters.
- The informers are public (`playground_informer`, `core_service_informer`, `slice_informers`,
  `open_model_informer`): the scaling
  controllers watch the very caches routing reads.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence

from llmaz.apis import constants as c
from llmaz.apis.resources import ENDPOINT_SLICES, INFERENCE_SERVICES, OPEN_MODELS, PLAYGROUNDS
from llmaz.apis.resources import SERVICES as CORE_SERVICES
from llmaz.apis.serving import LB_SERVICE_SUFFIX, main_model, serves_across_namespaces
from llmaz.gateway.routing import engines, routes
from llmaz.gateway.routing.adapters import Adapter, adapter_table
from llmaz.gateway.routing.routes import Backend, Endpoint
from llmaz.runtime.cache import DeletedFinalStateUnknown, Informer, Obj, SharedInformerFactory
from llmaz.runtime.rbac import READ, allow

RBAC_RULES = tuple(
    allow(r, *READ) for r in (OPEN_MODELS, PLAYGROUNDS, INFERENCE_SERVICES, ENDPOINT_SLICES, CORE_SERVICES)
)

BACKEND_INDEX = "backend"
MODEL_INDEX = "model"
# The core Services the manager makes (the `-lb` ones among them) carry this label, and so do their EndpointSlices:
# the informers select on it.
LLMAZ_SERVICES_SELECTOR = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY}"
ACTIVATOR_SLICES_SELECTOR = f"{routes.MANAGED_BY_LABEL}={routes.ACTIVATOR_MANAGED_BY}"


def _model_index(obj: Obj) -> list[str]:
    model = main_model(obj)
    return [model] if model else []


def _replicas(obj: Obj | None) -> int:
    spec = (obj or {}).get("spec")
    value = spec.get("replicas", 1) if isinstance(spec, dict) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def compact_service(obj: Obj) -> Obj:
    """A core Service reduced to what the activator reads: its key, its ports and its IP families."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ports = [
        {key: port[key] for key in ("name", "port", "protocol") if key in port}
        for port in spec.get("ports") or []
        if isinstance(port, dict)
    ]
    compact_spec: Obj = {"ports": ports}
    if isinstance(spec.get("ipFamilies"), list):
        compact_spec["ipFamilies"] = list(spec["ipFamilies"])
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}, "spec": compact_spec}


class _Invalidate:
    """An event handler that marks the route table stale."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.invalidate()

    def on_update(self, old: Obj, new: Obj) -> None:
        if main_model(old) != main_model(new):
            self._catalog.invalidate()

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.invalidate()


def _adapters_spec(obj: Obj) -> object:
    return (obj.get("spec") or {}).get("adapters")


class _InvalidateModels(_Invalidate):
    """An OpenModel event handler: the adapter table is stale when a model's adapters change, and the route table
    when its opt-in to serving across namespaces does (which also wakes the requests held on it)."""

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.invalidate()
        self._catalog.notify(_named(obj))

    def on_update(self, old: Obj, new: Obj) -> None:
        if serves_across_namespaces(old) != serves_across_namespaces(new):
            self._catalog.invalidate()
            self._catalog.notify(_named(new))
        elif _adapters_spec(old) != _adapters_spec(new):
            self._catalog.invalidate()

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.invalidate()
        self._catalog.notify(_named(_object(obj)))


def _named(obj: Obj) -> list[str]:
    name = (obj.get("metadata") or {}).get("name")
    return [name] if isinstance(name, str) and name else []


def _object(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


class _NotifyServing:
    """A Playground or inference Service event handler: wakes whoever waits on the model it serves."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.notify(_served(obj))

    def on_update(self, old: Obj, new: Obj) -> None:
        self._catalog.notify({*_served(old), *_served(new)})

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.notify(_served(_object(obj)))


def _served(obj: Obj) -> set[str]:
    model = main_model(obj)
    return {model} if model else set()


class _NotifyBackend:
    """An EndpointSlice or core Service event handler: wakes whoever waits on a model its `-lb` Service serves."""

    def __init__(self, catalog: Catalog, backend_keys: Callable[[Obj], list[str]]) -> None:
        self._catalog = catalog
        self._keys = backend_keys

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._catalog.notify_backends(self._keys(obj))

    def on_update(self, old: Obj, new: Obj) -> None:
        self._catalog.notify_backends({*self._keys(old), *self._keys(new)})

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._catalog.notify_backends(self._keys(_object(obj)))


def _service_key(obj: Obj) -> list[str]:
    meta = obj.get("metadata") or {}
    return [f"{meta.get('namespace')}/{meta.get('name')}"]


class Catalog:
    """Served models and their ready endpoints, read from informers (see the module docstring)."""

    def __init__(
        self,
        playgrounds: Informer,
        services: Informer,
        open_models: Informer,
        endpoint_slices: Sequence[Informer],
        core_services: Informer | None = None,
    ) -> None:
        """`endpoint_slices` are read as one cache. `core_services` (the manager's core Services) is needed only by
        the activator; without it the catalog knows no `-lb` Service and the activator keeps no slice."""
        self.playground_informer = playgrounds
        self.core_service_informer = core_services
        self.slice_informers = tuple(endpoint_slices)
        self._informers = (playgrounds, services, open_models, *self.slice_informers) + (
            (core_services,) if core_services is not None else ()
        )
        self._services = services
        self._open_models = open_models
        self.open_model_informer = open_models
        playgrounds.add_indexers({MODEL_INDEX: _model_index})
        for slices in self.slice_informers:
            slices.add_indexers({BACKEND_INDEX: routes.slice_backend_key})
        self._table: dict[str, tuple[Backend, ...]] | None = None
        self._claimed: set[Backend] | None = None
        self._adapters: dict[str, list[Adapter]] | None = None
        self._adapter_names: dict[str, Adapter] = {}
        self._backend_models: dict[str, set[str]] | None = None
        self._runtimes: dict[str, frozenset[str | None]] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        for informer in (playgrounds, services):
            informer.add_event_handler(_Invalidate(self))
        open_models.add_event_handler(_InvalidateModels(self))
        # After the invalidation above, so that a backend's models are read from the new table.
        for informer in (playgrounds, services):
            informer.add_event_handler(_NotifyServing(self))
        for slices in self.slice_informers:
            slices.add_event_handler(_NotifyBackend(self, routes.slice_backend_key))
        if core_services is not None:
            core_services.add_event_handler(_NotifyBackend(self, _service_key))

    @classmethod
    def watch(cls, informers: SharedInformerFactory, gateway_service: str | None = None) -> Catalog:
        """A catalog over the factory's shared informers (call before the factory starts).

        `gateway_service` ("namespace/name") is the gateway's own Service, whose slices the activator reads.
        """
        slices = [
            informers.informer_for(ENDPOINT_SLICES, label_selector=LLMAZ_SERVICES_SELECTOR),
            informers.informer_for(ENDPOINT_SLICES, label_selector=ACTIVATOR_SLICES_SELECTOR),
        ]
        if gateway_service:
            namespace, _, name = gateway_service.partition("/")
            selector, field = f"{routes.SERVICE_NAME_LABEL}={name}", f"metadata.namespace={namespace}"
            slices.append(informers.informer_for(ENDPOINT_SLICES, label_selector=selector, field_selector=field))
        keep = frozenset({gateway_service} if gateway_service else ())
        for informer in slices:
            informer.set_transform(functools.partial(routes.compact_endpoint_slice, keep=keep))
        core_services = informers.informer_for(CORE_SERVICES, label_selector=LLMAZ_SERVICES_SELECTOR)
        core_services.set_transform(compact_service)
        return cls(
            informers.informer_for(PLAYGROUNDS),
            informers.informer_for(INFERENCE_SERVICES),
            informers.informer_for(OPEN_MODELS),
            slices,
            core_services,
        )

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self._informers)

    def invalidate(self) -> None:
        self._table = None
        self._claimed = None
        self._adapters = None
        self._backend_models = None
        self._runtimes = {}

    def notify(self, models: Iterable[str] | None = None) -> None:
        """Wake the requests held on `models` (None: on every model) to read their endpoints again."""
        for model in list(self._waiters) if models is None else models:
            for waiter in self._waiters.pop(model, ()):
                if not waiter.done():
                    waiter.set_result(None)

    def notify_backends(self, keys: Iterable[str]) -> None:
        """Wake the requests held on the models the `-lb` Services `keys` ("namespace/name") serve."""
        if not self._waiters:
            return
        if self._backend_models is None:
            found: dict[str, set[str]] = {}
            for model, backends in self._routes().items():
                for backend in backends:
                    found.setdefault(backend.key, set()).add(model)
            self._backend_models = found
        self.notify({model for key in keys for model in self._backend_models.get(key, ())})

    def notify_endpoint(self, endpoint: Endpoint) -> None:
        """Wake the requests held on the models `endpoint` serves (its adapters changed)."""
        self.notify([model for model in list(self._waiters) if endpoint in self.endpoints(model)])

    async def await_endpoints(
        self,
        model: str,
        deadline: float,
        select: Callable[[list[Endpoint]], list[Endpoint]] | None = None,
    ) -> list[Endpoint]:
        """The ready endpoints of `model` (those `select` keeps, when given) once it has some, or [] at `deadline`
        (the event loop's clock), or [] at once when `model` is no longer served (its last Playground or Service
        deleted meanwhile: nothing is coming for it)."""
        loop = asyncio.get_running_loop()

        def found() -> list[Endpoint]:
            endpoints = self.endpoints(model)
            return select(endpoints) if select is not None and endpoints else endpoints

        while not (endpoints := found()) and loop.time() < deadline and self.serves(model):
            waiter = loop.create_future()
            waiting = self._waiters.setdefault(model, [])
            waiting.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                return found()
            finally:
                waiting = self._waiters.get(model, [])
                if waiter in waiting:
                    waiting.remove(waiter)
                    if not waiting:
                        del self._waiters[model]
        return endpoints

    def waiting(self, model: str) -> int:
        """Requests held on `model` now (for tests and debugging)."""
        return len(self._waiters.get(model, ()))

    def playgrounds(self) -> list[Obj]:
        return self.playground_informer.store.list()

    def playground(self, namespace: str, name: str) -> Obj | None:
        return self.playground_informer.store.get(f"{namespace}/{name}")

    def playgrounds_serving(self, model: str) -> list[Obj]:
        """The Playgrounds `model` is routed to: whose main model it is, in the namespaces tenancy routes it to
        (a Playground in another namespace never gets its requests, and is never woken for them)."""
        routed = set(self._routes().get(model, ()))
        return [
            pg for pg in self.playground_informer.store.by_index(MODEL_INDEX, model) if routes.lb_backend(pg) in routed
        ]

    def playgrounds_claiming(self, model: str) -> list[Obj]:
        """Every Playground whose main model is `model`, routed to or not (whose routing one's change may change)."""
        return self.playground_informer.store.by_index(MODEL_INDEX, model)

    def routed(self, playground: Obj) -> bool:
        """Whether requests for the Playground's main model may go to it (see `playgrounds_serving`)."""
        model = main_model(playground)
        return model is not None and routes.lb_backend(playground) in self._routes().get(model, ())

    def core_service(self, namespace: str, name: str) -> Obj | None:
        """A core Service the manager made (compacted: ports and IP families), or None."""
        informer = self.core_service_informer
        return None if informer is None else informer.store.get(f"{namespace}/{name}")

    def slices_of(self, namespace: str, service: str) -> list[Obj]:
        """The cached (compacted) EndpointSlices of a core Service, the activator's included, each once."""
        found: dict[str, Obj] = {}
        for informer in self.slice_informers:
            for slice_ in informer.store.by_index(BACKEND_INDEX, f"{namespace}/{service}"):
                found.setdefault(str(slice_["metadata"].get("name")), slice_)
        return list(found.values())

    def endpoint_slice(self, namespace: str, name: str) -> Obj | None:
        """A cached (compacted) EndpointSlice by name, or None."""
        for informer in self.slice_informers:
            if (found := informer.store.get(f"{namespace}/{name}")) is not None:
                return found
        return None

    def _routes(self) -> dict[str, tuple[Backend, ...]]:
        if self._table is None:
            self._table = routes.route_table(
                self.playground_informer.store.list(), self._services.store.list(), self._open_models.store.get
            )
        return self._table

    def _adapter_table(self) -> dict[str, list[Adapter]]:
        if self._adapters is None or self._table is None:
            # OpenModels are cluster-scoped: the cache key is the name.
            self._adapters = adapter_table(self._routes(), self._open_models.store.get)
            self._adapter_names = {a.name: a for listed in self._adapters.values() for a in listed}
        return self._adapters

    def models(self) -> list[str]:
        return sorted(self._routes())

    def served_names(self) -> list[str]:
        """Every name a request may route by, sorted: the served models and their adapters."""
        self._adapter_table()
        return sorted([*self._routes(), *self._adapter_names])

    def adapter(self, name: str) -> Adapter | None:
        """The adapter served under `name`, or None (a served model's name is never an adapter's)."""
        self._adapter_table()
        return self._adapter_names.get(name)

    def adapters_of(self, model: str) -> list[Adapter]:
        """The adapters served under `model`'s OpenModel, in spec order (empty without any)."""
        return list(self._adapter_table().get(model, ()))

    def left_out(self, adapter: Adapter) -> str | None:
        """Why no replica will hold `adapter`: every inference Service serving its model left it out (their
        `status.unavailableAdapters`, the first one's finding), or None."""
        first: str | None = None
        for backend in self._routes().get(adapter.model, ()):
            recorded = self._unavailable_adapters(backend)
            entry = next((e for e in recorded if e.get("name") == adapter.name), None)
            if entry is None:
                return None
            first = first or f"adapter {adapter.name} is left out of model {adapter.model}: {entry.get('message')}"
        return first

    def left_out_at(self, model: str) -> dict[Endpoint, frozenset[str]]:
        """The ready endpoints of `model` whose inference Service left adapters out, each with their names (its
        `status.unavailableAdapters`)."""
        found: dict[Endpoint, frozenset[str]] = {}
        for backend in self._routes().get(model, ()):
            names = frozenset(str(e["name"]) for e in self._unavailable_adapters(backend) if e.get("name"))
            if names:
                for endpoint in routes.ready_endpoints(self.slices_of(backend.namespace, backend.service)):
                    found.setdefault(endpoint, names)
        return found

    def _unavailable_adapters(self, backend: Backend) -> list[Obj]:
        """The entries of `status.unavailableAdapters` of the inference Service behind `backend`."""
        service = self._services.store.get(f"{backend.namespace}/{backend.service.removesuffix(LB_SERVICE_SUFFIX)}")
        recorded = ((service or {}).get("status") or {}).get("unavailableAdapters") or ()
        return [entry for entry in recorded if isinstance(entry, dict)]

    def endpoints_with_adapters(self) -> set[Endpoint]:
        """The ready endpoints of every served model that has adapters (the engine signals list their adapters)."""
        return {endpoint for model in self._adapter_table() for endpoint in self.endpoints(model)}

    def endpoint_runtimes(self, model: str) -> dict[Endpoint, str | None]:
        """The ready endpoints of `model`, each with the BackendRuntime name of the Playground behind it (None for
        an inference Service without a Playground)."""
        found: dict[Endpoint, str | None] = {}
        for backend in self._routes().get(model, ()):
            owner = self.playground(backend.namespace, backend.service.removesuffix(LB_SERVICE_SUFFIX))
            runtime = None if owner is None else routes.backend_runtime_name(owner)
            for endpoint in routes.ready_endpoints(self.slices_of(backend.namespace, backend.service)):
                found.setdefault(endpoint, runtime)
        return found

    def engine_at(
        self, model: str, recognised: Callable[[Endpoint], str | None] | None = None
    ) -> Callable[[Endpoint], engines.Engine]:
        """The engine at each endpoint of `model`: the one `recognised` at it from its metrics, else the one of the
        BackendRuntime of the Playground behind it, else `engines.UNKNOWN`. Which backend an endpoint belongs to is
        read only when the model's backends run different runtimes, and then once per function returned."""
        names = self._runtime_names(model)
        only = engines.engine(next(iter(names))) if len(names) == 1 else engines.UNKNOWN
        by_endpoint: dict[Endpoint, str | None] | None = None

        def engine_of(endpoint: Endpoint) -> engines.Engine:
            nonlocal by_endpoint
            name = None if recognised is None else recognised(endpoint)
            if name is not None:
                return engines.engine(name)
            if len(names) < 2:
                return only
            by_endpoint = self.endpoint_runtimes(model) if by_endpoint is None else by_endpoint
            return engines.engine(by_endpoint.get(endpoint))

        return engine_of

    def _runtime_names(self, model: str) -> frozenset[str | None]:
        """The BackendRuntime names of `model`'s backends (None for an inference Service without a Playground),
        kept until a Playground or Service changes."""
        found = self._runtimes.get(model)
        if found is None:
            names: set[str | None] = set()
            for backend in self._routes().get(model, ()):
                owner = self.playground(backend.namespace, backend.service.removesuffix(LB_SERVICE_SUFFIX))
                names.add(None if owner is None else routes.backend_runtime_name(owner))
            found = self._runtimes[model] = frozenset(names)
        return found

    def capabilities(self, model: str) -> frozenset[engines.Capability]:
        """What the engines behind `model` serve: for each backend, its Playground's engine started with its args
        (`engines.Engine.capabilities`); a backend without a Playground (an inference Service alone) runs an engine
        not known, taken to serve everything. A model served by several backends serves what any of them does."""
        found: set[engines.Capability] = set()
        for backend in self._routes().get(model, ()):
            owner = self.playground(backend.namespace, backend.service.removesuffix(LB_SERVICE_SUFFIX))
            if owner is None:
                return engines.ALL_CAPABILITIES
            engine = engines.engine(routes.backend_runtime_name(owner))
            found.update(engine.capabilities(routes.backend_runtime_args(owner)))
        return frozenset(found)

    def listed_capabilities(self, model: str) -> list[str]:
        """`capabilities(model)` as `/v1/models` lists them, in `engines.Capability` order."""
        served = self.capabilities(model)
        return [str(cap) for cap in engines.Capability if cap in served]

    def model_card(self, name: str) -> dict[str, object] | None:
        """The `/v1/models` entry of a served model or adapter, or None."""
        if self.serves(name):
            return routes.model_card(name, self._open_models.store.get(name), self.listed_capabilities(name))
        adapter = self.adapter(name)
        if adapter is None:
            return None
        base = adapter.model
        card = routes.model_card(base, self._open_models.store.get(base), self.listed_capabilities(base))
        return {**card, "id": name, "parent": base}

    def serves(self, model: str) -> bool:
        return model in self._routes()

    def endpoints(self, model: str) -> list[Endpoint]:
        """The ready endpoints of every backend serving `model` (empty for an unknown model)."""
        found: set[Endpoint] = set()
        for backend in self._routes().get(model, ()):
            found.update(routes.ready_endpoints(self.slices_of(backend.namespace, backend.service)))
        return sorted(found)

    def readiness(self) -> dict[str, tuple[int, int]]:
        """Per served model: (its ready endpoints, the replicas asked for it). A backend asks for its Playground's
        `spec.replicas`, else (an inference Service without a Playground) its Service's; absent is 1, the API's
        default. A sleeping Playground asks for 0."""
        found: dict[str, tuple[int, int]] = {}
        for model, backends in self._routes().items():
            asked = 0
            for backend in backends:
                namespace, name = backend.namespace, backend.service.removesuffix(LB_SERVICE_SUFFIX)
                owner = self.playground(namespace, name) or self._services.store.get(f"{namespace}/{name}")
                asked += _replicas(owner)
            found[model] = (len(self.endpoints(model)), asked)
        return found

    def routed_endpoints(self) -> list[Endpoint]:
        """Every ready endpoint of every Playground and inference Service serving a model, each once, sorted: also
        those the model is not routed to (another namespace owns its name), whose engines' signals still say when
        they last worked (idle detection judges such a Playground by its own engines)."""
        if self._claimed is None:
            self._claimed = routes.claimed_backends(self.playground_informer.store.list(), self._services.store.list())
        backends = self._claimed
        found: set[Endpoint] = set()
        for backend in backends:
            found.update(routes.ready_endpoints(self.slices_of(backend.namespace, backend.service)))
        return sorted(found)

    def model_list(self) -> dict[str, object]:
        adapters = {model: [a.name for a in listed] for model, listed in self._adapter_table().items()}
        return routes.model_list(self._routes(), self._open_models.store.get, adapters, self.listed_capabilities)

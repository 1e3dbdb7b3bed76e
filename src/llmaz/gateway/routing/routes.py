"""Pure routing: which models llmaz serves, behind which `-lb` Services, on which ready endpoints.

Inputs are cached objects (plain dicts, read-only); nothing here does I/O, keeps state or reads a clock.

Rules:
- A Playground serves its main model (`llmaz.apis.serving.main_model`, by role, as the controllers pick it). It
  owns an inference Service of its own name, so its backend is the core Service `<name>-lb` beside it.
- An inference Service serves its main model the same way, behind `<name>-lb`.
- A Playground and the Service it owns name the same backend, which is counted once. Several backends of one
  namespace may serve one model (several Playgrounds): a request may go to any of their endpoints.
- Namespaces are tenants (`llmaz.apis.serving.routed_namespaces`, docs/tenancy.md): a model is routed only to the
  backends of the namespace that claimed it first, unless its OpenModel carries
  `llmaz.io/serve-across-namespaces: "true"`; then to every namespace's. Claimants in other namespaces get no
  request, and the Playground controller tells them so in their `ModelRouted` condition.
- An endpoint is ready when it has an address, `conditions.ready` is not false and `conditions.terminating` is
  not true. An absent `ready` means "unknown", which the EndpointSlice API asks consumers to treat as ready
  (the EndpointSlice controller always sets it). Its port is the slice's TCP port named `http` (the `-lb`
  Service's), else the slice's only TCP port; a slice without such a port has no usable endpoint.
- The gateway's own activator slices (label `endpointslice.kubernetes.io/managed-by: llmaz-gateway.llmaz.io`, see
  `activator`) are never a route: their endpoints are gateway pods, and routing to them would loop.
- `/v1/models` lists every served model once, sorted, with `owned_by` and `created` from its OpenModel
  (`spec.ownedBy`, default "llmaz"; `spec.createdAt`, else the OpenModel's creationTimestamp, else 0). A
  model whose OpenModel is missing is listed too: it is routed (and answers 503 until it has endpoints). A model's
  LoRA adapters (`adapters`) follow it, each with `parent` set to the model and the model's `owned_by` and
  `created`. Each entry also says what the gateway forwards for it (`capabilities`, in `engines.Capability` order),
  beside OpenAI's fields, which stay as OpenAI has them.
- A Playground's engine is its `spec.backendRuntimeConfig.backendName` (the CRD's default, `vllm`, when unset), started
  with its `spec.backendRuntimeConfig.args`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.serving import LB_SERVICE_SUFFIX, lb_service_name, main_model, routed_namespaces
from llmaz.runtime.timestamp import parse_timestamp

Obj = dict[str, Any]

# Set by the EndpointSlice controller on every slice of a Service (the informer selects on it).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# Who manages a slice: the EndpointSlice controller manages only its own (`endpointslice-controller.k8s.io`).
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# The value on the slices llmaz-gateway's activator keeps for sleeping Playgrounds.
ACTIVATOR_MANAGED_BY = "llmaz-gateway.llmaz.io"


@dataclass(frozen=True, slots=True, order=True)
class Backend:
    """The core `-lb` Service in front of one inference Service's group leaders."""

    namespace: str
    service: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.service}"


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    address: str
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def connect_url(self, resolve: Mapping[str, str]) -> str:
        """The base URL to connect to: at `resolve[address]` when the map names this address (curl's `--resolve`),
        else the endpoint's own."""
        target = resolve.get(self.address)
        return self.base_url if target is None else Endpoint(target, self.port).base_url

    def __str__(self) -> str:
        return self.base_url.removeprefix("http://")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _metadata(obj: Obj) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata"))
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def lb_backend(obj: Obj) -> Backend | None:
    namespace, name = _metadata(obj)
    return Backend(namespace, lb_service_name(name)) if namespace and name else None


def route_table(
    playgrounds: Iterable[Obj], services: Iterable[Obj], open_model: Callable[[str], Obj | None] = lambda _: None
) -> dict[str, tuple[Backend, ...]]:
    """model name -> the backends it is routed to (sorted, each once): those of the namespaces the tenancy rule
    routes it to (`open_model(name)` finds a model's OpenModel, which may opt in to every namespace)."""
    claimants: dict[str, list[Obj]] = {}
    for obj in (*playgrounds, *services):
        model = main_model(obj)
        if model is not None and lb_backend(obj) is not None:
            claimants.setdefault(model, []).append(obj)
    table: dict[str, tuple[Backend, ...]] = {}
    for model, claiming in claimants.items():
        routed = routed_namespaces(claiming, open_model(model))
        backends = {backend for obj in claiming if (backend := lb_backend(obj)) and backend.namespace in routed}
        table[model] = tuple(sorted(backends))
    return table


def claimed_backends(playgrounds: Iterable[Obj], services: Iterable[Obj]) -> set[Backend]:
    """The backends of every Playground and inference Service serving a model, whether the model is routed to them
    or not (another namespace may own its name)."""
    return {backend for obj in (*playgrounds, *services) if main_model(obj) and (backend := lb_backend(obj))}


def slice_backend_key(obj: Obj) -> list[str]:
    """Index function: the "namespace/service" an EndpointSlice belongs to (none without the label)."""
    meta = _mapping(obj.get("metadata"))
    service = _mapping(meta.get("labels")).get(SERVICE_NAME_LABEL)
    namespace = meta.get("namespace")
    return [f"{namespace}/{service}"] if isinstance(service, str) and isinstance(namespace, str) else []


def is_activator_slice(obj: Obj) -> bool:
    """Whether an EndpointSlice is one of the activator's (its endpoints are gateway pods, never engines)."""
    labels = _mapping(_mapping(obj.get("metadata")).get("labels"))
    return labels.get(MANAGED_BY_LABEL) == ACTIVATOR_MANAGED_BY


def compact_endpoint_slice(obj: Obj, keep: Collection[str] = ()) -> Obj:
    """An EndpointSlice reduced to what the gateway reads; slices of other Services keep only their key.

    Used as the informer's transform: the gateway watches every Service's slices cluster-wide, and most of
    them never matter to it. Kept: the ports, addresses and conditions of `-lb` slices (routing); for the
    activator's own slices also their managed-by label, uid and address type (it deletes only its own, by uid);
    for the slices of the Services in `keep` ("namespace/name": the gateway's own Service) also the address type
    and node names (the activator copies them).
    """
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    service = labels.get(SERVICE_NAME_LABEL)
    compact_meta: Obj = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if isinstance(service, str):
        compact_meta["labels"] = {SERVICE_NAME_LABEL: service}
    compact: Obj = {"metadata": compact_meta}
    kept = isinstance(service, str) and f"{meta.get('namespace')}/{service}" in keep
    if not isinstance(service, str) or not (service.endswith(LB_SERVICE_SUFFIX) or kept):
        return compact
    if is_activator_slice(obj):
        compact_meta["labels"][MANAGED_BY_LABEL] = ACTIVATOR_MANAGED_BY
        compact_meta["uid"] = meta.get("uid")
    if kept or is_activator_slice(obj):
        compact["addressType"] = obj.get("addressType")
    compact["ports"] = [
        {key: port[key] for key in ("name", "port", "protocol") if key in port}
        for port in obj.get("ports") or []
        if isinstance(port, Mapping)
    ]
    compact["endpoints"] = [_compact_endpoint(ep, kept) for ep in obj.get("endpoints") or [] if isinstance(ep, Mapping)]
    return compact


def _compact_endpoint(endpoint: Mapping[str, Any], with_node: bool) -> Obj:
    compact: Obj = {
        "addresses": list(endpoint.get("addresses") or []),
        "conditions": dict(_mapping(endpoint.get("conditions"))),
    }
    if with_node and isinstance(endpoint.get("nodeName"), str):
        compact["nodeName"] = endpoint["nodeName"]
    return compact


def _serving_port(slice_: Obj) -> int | None:
    ports = [
        p
        for p in slice_.get("ports") or []
        if isinstance(p, Mapping) and isinstance(p.get("port"), int) and p.get("protocol", "TCP") == "TCP"
    ]
    named = [p for p in ports if p.get("name") == c.HTTP_PORT_NAME]
    chosen = named or (ports if len(ports) == 1 else [])
    return int(chosen[0]["port"]) if chosen else None


def is_ready(endpoint: Mapping[str, Any]) -> bool:
    """The endpoint has no `ready: false` and no `terminating: true` (an absent `ready` counts as ready)."""
    conditions = _mapping(endpoint.get("conditions"))
    return conditions.get("ready") is not False and conditions.get("terminating") is not True


def ready_endpoints(slices: Iterable[Obj]) -> list[Endpoint]:
    """The ready endpoints of a Service's slices, each once, sorted; the activator's slices are skipped."""
    found: set[Endpoint] = set()
    for slice_ in slices:
        if is_activator_slice(slice_):
            continue
        port = _serving_port(slice_)
        if port is None:
            continue
        for endpoint in slice_.get("endpoints") or []:
            if not isinstance(endpoint, Mapping) or not is_ready(endpoint):
                continue
            # Every address of one endpoint is the same pod (dual-stack slices are per family): take the first.
            addresses = [a for a in endpoint.get("addresses") or [] if isinstance(a, str) and a]
            if addresses:
                found.add(Endpoint(addresses[0], port))
    return sorted(found)


def _unix_time(value: Any) -> int | None:
    parsed = parse_timestamp(value)
    return None if parsed is None else int(parsed.timestamp())


def model_card(model: str, open_model: Obj | None, capabilities: Iterable[str] | None = None) -> dict[str, Any]:
    """OpenAI's model object for `model`, from its OpenModel when there is one, with its `capabilities` when given."""
    spec = _mapping((open_model or {}).get("spec"))
    meta = _mapping((open_model or {}).get("metadata"))
    created = _unix_time(spec.get("createdAt")) or _unix_time(meta.get("creationTimestamp")) or 0
    owned_by = spec.get("ownedBy")
    card: dict[str, Any] = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": owned_by if isinstance(owned_by, str) and owned_by else c.DEFAULT_OWNED_BY,
    }
    if capabilities is not None:
        card["capabilities"] = list(capabilities)
    return card


def model_list(
    models: Iterable[str],
    open_model: Callable[[str], Obj | None],
    adapters: Mapping[str, Iterable[str]] | None = None,
    capabilities: Callable[[str], Iterable[str]] | None = None,
) -> dict[str, Any]:
    """OpenAI's list of models, sorted by id, each followed by its adapters (`adapters[model]`, listed with
    `parent`); `open_model(name)` finds a model's OpenModel, `capabilities(name)` what the gateway forwards for it."""
    data: list[dict[str, Any]] = []
    for model in sorted(set(models)):
        card = model_card(model, open_model(model), None if capabilities is None else capabilities(model))
        data.append(card)
        data.extend({**card, "id": name, "parent": model} for name in (adapters or {}).get(model, ()))
    return {"object": "list", "data": data}


def backend_runtime_name(playground: Obj) -> str:
    """The BackendRuntime a Playground runs its engine with."""
    config = _mapping(_mapping(playground.get("spec")).get("backendRuntimeConfig"))
    name = config.get("backendName")
    return name if isinstance(name, str) and name else c.DEFAULT_BACKEND_NAME


def backend_runtime_args(playground: Obj) -> list[str]:
    """The engine arguments a Playground adds (`spec.backendRuntimeConfig.args`; the strings among them)."""
    config = _mapping(_mapping(playground.get("spec")).get("backendRuntimeConfig"))
    args = config.get("args")
    return [arg for arg in args if isinstance(arg, str)] if isinstance(args, list) else []

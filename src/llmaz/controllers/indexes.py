"""Cache indexes that map a changed dependency to the objects that use it, and the mappers built on them.

An OpenModel or BackendRuntime change must wake exactly the Playgrounds (and Services) that use it, with their
namespace: llmaz's OpenModel watch enqueued Playgrounds without a namespace, so they only recovered by
error backoff, and it did not watch BackendRuntimes at all.

Model pods are cached only when they carry both the LeaderWorkerSet name label (set by the LWS controller) and
`llmaz.io/model-name` (set on every pod template by the Service builder), so the manager never holds other
pods. A pod belongs to the inference Service named like its LeaderWorkerSet, in its namespace.

Playgrounds and inference Services are also indexed by the main model they serve (`SERVED_MODEL`): which namespace
a model name is routed to depends on every claimant of it (`llmaz.apis.serving.owning_namespace`), so a claimant's
creation, deletion or change of model wakes the Playgrounds claiming that model (`claimants_of`).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from llmaz.apis import Playground, Service
from llmaz.apis import constants as c
from llmaz.apis.serving import main_model, serves_across_namespaces
from llmaz.controllers.builders import backend_name, diagnose_pod, playground_model_refs, service_model_refs
from llmaz.controllers.common import ParsedByVersion, controller_uid
from llmaz.runtime.cache import Informer, Obj, Store
from llmaz.runtime.controller import Predicate, Request

PLAYGROUND_MODELS = "llmaz.io/playground-models"
PLAYGROUND_BACKEND = "llmaz.io/playground-backend"
SERVICE_MODELS = "llmaz.io/service-models"
POD_SERVICE = "llmaz.io/pod-service"
# The main model a Playground or inference Service serves (the name llmaz-gateway routes by), on both caches.
SERVED_MODEL = "llmaz.io/served-model"
MODEL_POD_SELECTOR = f"{c.LWS_NAME_LABEL},{c.MODEL_NAME_LABEL}"


# Both Playground indexes run on each event in turn: one entry is enough for one parse to serve the two.
_parse_playground = ParsedByVersion(Playground, max_entries=1)


def _playground(obj: Obj) -> Playground | None:
    try:
        return _parse_playground(obj)
    except ValidationError:
        return None


def playground_models(obj: Obj) -> list[str]:
    playground = _playground(obj)
    return sorted({ref.name for ref in playground_model_refs(playground)}) if playground else []


def playground_backend(obj: Obj) -> list[str]:
    playground = _playground(obj)
    return [backend_name(playground)] if playground else []


def service_models(obj: Obj) -> list[str]:
    try:
        return sorted({ref.name for ref in service_model_refs(Service.from_dict(obj))})
    except ValidationError:
        return []


def _service_of(pod: Obj) -> Request | None:
    meta = pod.get("metadata") or {}
    lws = (meta.get("labels") or {}).get(c.LWS_NAME_LABEL)
    return Request(meta.get("namespace") or "", lws) if lws else None


def pod_service(obj: Obj) -> list[str]:
    """The key of the inference Service a model pod belongs to (its LeaderWorkerSet has the Service's name)."""
    service = _service_of(obj)
    return [service.key] if service else []


def service_of_pod(obj: Obj) -> list[Request]:
    """A mapper: the inference Service a model pod belongs to."""
    service = _service_of(obj)
    return [service] if service else []


def pod_finding_changed() -> Predicate:
    """Pass pod creations and deletions, and updates that change why the pod is not ready.

    Kubelet rewrites a pod's status on every probe flip and restart; only a changed finding can change the
    Service's status, so nothing else needs a reconcile.
    """
    return Predicate(update=lambda old, new: diagnose_pod(old) != diagnose_pod(new))


def users_of(store: Store, index: str) -> Callable[[Obj], list[Request]]:
    """A mapper: the objects in `store` whose `index` lists the changed object's name."""

    def map_users(obj: Obj) -> list[Request]:
        name = (obj.get("metadata") or {}).get("name", "")
        return [_request(user) for user in store.by_index(index, name)]

    return map_users


def everything_in(store: Store) -> Callable[[Obj], list[Request]]:
    """A mapper: every object in `store`, whatever changed (for inputs that shape all of them)."""

    def map_all(obj: Obj) -> list[Request]:
        return [_request(item) for item in store.list()]

    return map_all


def owner_named_like(store: Store, suffix: str = "") -> Callable[[Obj], list[Request]]:
    """A mapper: the object in `store` that a child named `<owner name><suffix>` belongs to, when it exists.

    It maps by name, not through owner references: an object in the way of a child (a user's object of the same
    name, which the owner must not take over, see builders/ownership.py) carries no reference to the owner, yet
    its deletion or a change of its controller must wake the owner at once. The owner's own children are named
    the same way, so they need no second mapping.
    """

    def map_owner(obj: Obj) -> list[Request]:
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        if not name.endswith(suffix) or name == suffix:
            return []
        owner = Request(meta.get("namespace") or "", name.removesuffix(suffix))
        return [owner] if store.get(owner.key) is not None else []

    return map_owner


def controller_changed() -> Predicate:
    """Pass updates that change the object's controller ownerReference (handed over, taken, or let go)."""
    return Predicate(update=lambda old, new: controller_uid(old) != controller_uid(new))


def _request(obj: Obj) -> Request:
    meta = obj.get("metadata") or {}
    return Request(meta.get("namespace") or "", meta.get("name") or "")


def served_model(obj: Obj) -> list[str]:
    """The main model a Playground or inference Service serves (none when it claims none)."""
    model = main_model(obj)
    return [model] if model else []


def add_serving_indexes(playgrounds: Informer, services: Informer) -> None:
    """Index both caches by the model they serve (`SERVED_MODEL`), before the informers start."""
    playgrounds.add_indexers({SERVED_MODEL: served_model})
    services.add_indexers({SERVED_MODEL: served_model})


def claimants_of(playgrounds: Store) -> Callable[[Obj], list[Request]]:
    """A mapper: the Playgrounds whose main model is the one the changed Playground or inference Service serves
    (called with the old and the new object of an update, so both models' claimants are woken)."""

    def map_claimants(obj: Obj) -> list[Request]:
        models = served_model(obj)
        return [_request(claimant) for model in models for claimant in playgrounds.by_index(SERVED_MODEL, model)]

    return map_claimants


def claims_changed() -> Predicate:
    """Pass creations, deletions, and updates that change the model an object serves (whose claimants it concerns)."""
    return Predicate(update=lambda old, new: served_model(old) != served_model(new))


def serving_opt_in_changed() -> Predicate:
    """Pass OpenModel updates that change its opt-in to serving across namespaces (`serves_across_namespaces`)."""
    return Predicate(update=lambda old, new: serves_across_namespaces(old) != serves_across_namespaces(new))

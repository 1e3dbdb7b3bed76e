"""Event handlers: turn informer events into Requests on a controller's work queue.

A mapper says which keys an object concerns (`enqueue_for_object`, `enqueue_for_owner`, `enqueue_mapped`);
`EnqueueHandler` plugs a mapper and its predicates into an informer. For an update it enqueues the keys of
both the old and the new object (an owner or a mapped key may have changed), without duplicates. Deletes
delivered as `DeletedFinalStateUnknown` tombstones are unwrapped to their last known state; a tombstone with
no usable state stands for the object named by its key.

Handlers run on the informer's dispatch path, so they only map and enqueue. An exception from a mapper or
predicate is logged and the event dropped: it must never stop the informer from delivering other events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from llmaz.runtime.cache.interfaces import DeletedFinalStateUnknown, Obj
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.controller.reconcile import Request
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import Resource, split_key

ObjectMapper = Callable[[Obj], Iterable[Request]]
"""Which keys an object concerns. Receives a cache object: read it, never change it."""

_log = get_logger("llmaz.runtime.controller")


class RequestQueue(Protocol):
    def add(self, item: Request) -> None: ...


def _metadata(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _request_for_object(obj: Obj) -> list[Request]:
    meta = _metadata(obj)
    name = meta.get("name")
    return [Request(meta.get("namespace") or "", name)] if name else []


def enqueue_for_object() -> ObjectMapper:
    """Map an object to its own key: the handler for the resource a controller is `for_`."""
    return _request_for_object


def _api_group(api_version: str) -> str:
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""


def enqueue_for_owner(owner: Resource) -> ObjectMapper:
    """Map an object to its controller owner's key, if that owner is of `owner`'s group and kind.

    Only the ownerReference with `controller: true` counts (there is at most one); the version in its
    apiVersion is ignored. A cluster-scoped owner gets a key without namespace.
    """

    def owner_requests(obj: Obj) -> list[Request]:
        meta = _metadata(obj)
        refs = meta.get("ownerReferences") or []
        ref = next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None)
        if ref is None or ref.get("kind") != owner.kind or _api_group(ref.get("apiVersion", "")) != owner.group:
            return []
        namespace = (meta.get("namespace") or "") if owner.namespaced else ""
        return [Request(namespace, ref["name"])]

    return owner_requests


def enqueue_mapped(map_object: Callable[[Obj], Iterable[Request]]) -> ObjectMapper:
    """Map an object with a function of your own (for example, every Playground that names this model)."""
    return map_object


class EnqueueHandler:
    """A `ResourceEventHandler` that filters events with `predicates` and enqueues what `mapper` returns."""

    def __init__(self, mapper: ObjectMapper, queue: RequestQueue, predicates: Sequence[Predicate] = ()) -> None:
        self._mapper = mapper
        self._queue = queue
        self._predicates = tuple(predicates)

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        try:
            if all(p.create(obj) for p in self._predicates):
                self._enqueue(self._mapper(obj))
        except Exception:
            _log.exception("Event handler error", event_type="create")

    def on_update(self, old: Obj, new: Obj) -> None:
        try:
            if all(p.update(old, new) for p in self._predicates):
                self._enqueue([*self._mapper(old), *self._mapper(new)])
        except Exception:
            _log.exception("Event handler error", event_type="update")

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        try:
            last_known = _unwrap(obj)
            if all(p.delete(last_known) for p in self._predicates):
                self._enqueue(self._mapper(last_known))
        except Exception:
            _log.exception("Event handler error", event_type="delete")

    def _enqueue(self, requests: Iterable[Request]) -> None:
        for request in dict.fromkeys(requests):
            self._queue.add(request)


def _unwrap(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    if not isinstance(obj, DeletedFinalStateUnknown):
        return obj
    if isinstance(obj.obj, dict) and _metadata(obj.obj).get("name"):
        return obj.obj
    namespace, name = split_key(obj.key)
    return {"metadata": {"namespace": namespace, "name": name}} if namespace else {"metadata": {"name": name}}

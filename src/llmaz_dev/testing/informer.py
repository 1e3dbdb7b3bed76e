"""An in-memory informer for unit tests of handlers and controllers: the test plays the API server.

`FakeInformer` keeps objects in a dict keyed like the real cache and calls its handlers synchronously, in
registration order, from whichever call changed it: `add`, `update`, `delete`, `delete_unknown` (a
tombstone) and `resync`. It is not synced until the test calls `mark_synced()`; a handler added later
receives an `on_add(obj, is_initial_list=True)` for every object already stored, as real informers do.

What it does not do, so tests that need these belong against a real API server:

- no list/watch, resourceVersions, bookmarks, 410 relists or backoff; objects are stored exactly as given
  (the test sets `metadata.resourceVersion` if a predicate needs it);
- no dispatch task or per-handler buffer: a slow or failing handler affects the caller directly, and an
  exception from a handler propagates to the test;
- no per-handler sync tracking and no resync period (call `resync()` to replay every object as an update);
- no mutation detection and no copies: handlers receive the very dicts the test passed in.
"""

from __future__ import annotations

import asyncio
import builtins

from llmaz.runtime.cache.interfaces import (
    DeletedFinalStateUnknown,
    IndexFunc,
    Obj,
    ResourceEventHandler,
)
from llmaz.runtime.resource import Resource, object_key


class FakeStore:
    """A dict-backed `Store` with indexers; indexes are computed on each `by_index` call."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.indexers: dict[str, IndexFunc] = {}

    def get(self, key: str) -> Obj | None:
        return self.objects.get(key)

    def list(self) -> list[Obj]:
        return list(self.objects.values())

    def keys(self) -> builtins.list[str]:
        return list(self.objects)

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        index = self.indexers[index_name]
        return [obj for obj in self.objects.values() if value in index(obj)]


class FakeInformer:
    """Implements `llmaz.runtime.cache.Informer`; see the module docstring for what it leaves out."""

    def __init__(self) -> None:
        self._store = FakeStore()
        self._handlers: list[ResourceEventHandler] = []
        self._synced = asyncio.Event()

    @property
    def store(self) -> FakeStore:
        return self._store

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        self._handlers.append(handler)
        for obj in self._store.list():
            handler.on_add(obj, True)

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self._store.indexers.update(indexers)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def mark_synced(self) -> None:
        self._synced.set()

    def add(self, obj: Obj) -> None:
        """Store a new object and deliver `on_add` (`is_initial_list` is True until `mark_synced`)."""
        self._store.objects[object_key(obj)] = obj
        for handler in self._handlers:
            handler.on_add(obj, not self.has_synced())

    def update(self, obj: Obj) -> None:
        """Replace a stored object and deliver `on_update(old, new)`; adds it if it was unknown."""
        key = object_key(obj)
        old = self._store.objects.get(key)
        if old is None:
            self.add(obj)
            return
        self._store.objects[key] = obj
        for handler in self._handlers:
            handler.on_update(old, obj)

    def delete(self, obj: Obj) -> None:
        """Remove an object and deliver `on_delete` with its final state."""
        self._store.objects.pop(object_key(obj), None)
        for handler in self._handlers:
            handler.on_delete(obj)

    def delete_unknown(self, key: str) -> None:
        """Deliver a missed delete: a `DeletedFinalStateUnknown` holding the last stored state (or `{}`)."""
        tombstone = DeletedFinalStateUnknown(key=key, obj=self._store.objects.pop(key, {}))
        for handler in self._handlers:
            handler.on_delete(tombstone)

    def resync(self) -> None:
        """Deliver `on_update(obj, obj)` for every stored object, like a periodic resync."""
        for obj in self._store.list():
            for handler in self._handlers:
                handler.on_update(obj, obj)


class FakeInformerSource:
    """Hands out one `FakeInformer` per resource, creating it on first use (an `InformerSource`)."""

    def __init__(self) -> None:
        self.informers: dict[Resource, FakeInformer] = {}
        self.scoped: dict[tuple[Resource, str | None, str | None, str | None], FakeInformer] = {}
        """Informers asked for with a namespace or selector, by (resource, namespace, labels, fields)."""

    def informer_for(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> FakeInformer:
        """One informer per scope; the fake does not filter by it (tests add only matching objects)."""
        if namespace is None and label_selector is None and field_selector is None:
            return self.informers.setdefault(resource, FakeInformer())
        return self.scoped.setdefault((resource, namespace, label_selector, field_selector), FakeInformer())

    def mark_all_synced(self) -> None:
        for informer in (*self.informers.values(), *self.scoped.values()):
            informer.mark_synced()

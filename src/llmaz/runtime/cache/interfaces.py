"""The contract between informers (producers of events) and controllers (consumers).

Objects are plain JSON-decoded dicts shared by the cache and every handler. They are read-only by contract:
a handler or reconciler that needs to change one deep-copies it first.

Handlers are called from the informer's dispatch task, one event at a time and in order per informer. They
must be quick and must not block: the usual handler only maps the object to keys and adds them to a work
queue.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], list[str]]


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """A delete the informer did not see (it was down or its watch expired), found when it relisted.

    `obj` is the last state the cache held, which may be stale.
    """

    key: str
    obj: Obj


class ResourceEventHandler(Protocol):
    def on_add(self, obj: Obj, is_initial_list: bool) -> None: ...

    def on_update(self, old: Obj, new: Obj) -> None: ...

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None: ...


class Store(Protocol):
    """Read access to an informer's cache."""

    def get(self, key: str) -> Obj | None: ...

    def list(self) -> builtins.list[Obj]: ...

    def keys(self) -> builtins.list[str]: ...

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]: ...


class Informer(Protocol):
    """A shared informer for one resource and scope."""

    @property
    def store(self) -> Store: ...

    def add_event_handler(self, handler: ResourceEventHandler) -> None: ...

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None: ...

    def has_synced(self) -> bool: ...

    async def wait_for_sync(self) -> None: ...

"""The informer's indexed cache: key -> object, plus secondary indexes kept in step.

Invariants:
- `_items` maps `object_key(obj)` ("namespace/name" or "name") to the latest object seen.
- For every index name, `_indices[name][value]` is exactly the set of keys whose object `_indexers[name]`
  files under `value`; empty sets are removed. Every mutation updates the indexes before returning.
- The built-in "namespace" index is always present.
- `_filed[name][key]` holds the values `key` is filed under in every other index (absent when none), so that
  replacing or deleting an object unfiles it without calling the index function on the old object again:
  one call per object version, which matters when an index function parses the object.
- Single-threaded by design: only the informer's task mutates a store, and readers on the same event loop
  never observe a half-applied change because no method awaits.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from llmaz.runtime.cache.indexers import NAMESPACE_INDEX, index_by_namespace
from llmaz.runtime.cache.interfaces import DeletedFinalStateUnknown, IndexFunc, Obj
from llmaz.runtime.resource import object_key


@dataclass(slots=True)
class ReplaceDiff:
    """What `replace` changed: new keys, replaced keys (old, new) and keys that vanished (as tombstones)."""

    added: list[Obj] = field(default_factory=list)
    updated: list[tuple[Obj, Obj]] = field(default_factory=list)
    deleted: list[DeletedFinalStateUnknown] = field(default_factory=list)


class IndexedStore:
    """Implements `llmaz.runtime.cache.Store`, plus the mutations the informer applies."""

    def __init__(self, indexers: dict[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: index_by_namespace}
        self._indices: dict[str, dict[str, set[str]]] = {NAMESPACE_INDEX: {}}
        self._filed: dict[str, dict[str, tuple[str, ...]]] = {}
        if indexers:
            self.add_indexers(indexers)

    # Reads

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list(self) -> builtins.list[Obj]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        if index_name not in self._indices:
            raise KeyError(f"no index named {index_name!r}")
        return sorted(self._indices[index_name].get(value, ()))

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        return [self._items[k] for k in self.index_keys(index_name, value)]

    def index_values(self, index_name: str) -> builtins.list[str]:
        return sorted(self._indices[index_name])

    # Mutations

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add indexes (building them over the current contents). Re-adding a name is an error."""
        for name, fn in indexers.items():
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
            self._indexers[name] = fn
            self._indices[name] = {}
            self._filed[name] = {}
            for key, obj in self._items.items():
                self._file(name, key, obj)

    def upsert(self, obj: Obj) -> Obj | None:
        """Add or replace `obj`; return the previous object under its key, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unfile_all(key, old)
        self._items[key] = obj
        for name in self._indexers:
            self._file(name, key, obj)
        return old

    def delete(self, key: str) -> Obj | None:
        """Remove `key`; return the object it held, if any."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unfile_all(key, old)
        return old

    def replace(self, objs: builtins.list[Obj]) -> ReplaceDiff:
        """Make the store hold exactly `objs`; report the difference from what it held before.

        Keys held before but absent from `objs` come back as tombstones carrying their last known state.
        An object whose resourceVersion is unchanged is still reported as updated (old is new's predecessor).
        """
        diff = ReplaceDiff()
        incoming = {object_key(o): o for o in objs}
        for key in [k for k in self._items if k not in incoming]:
            old = self.delete(key)
            assert old is not None
            diff.deleted.append(DeletedFinalStateUnknown(key, old))
        for obj in incoming.values():
            old = self.upsert(obj)
            if old is None:
                diff.added.append(obj)
            else:
                diff.updated.append((old, obj))
        return diff

    def _file(self, name: str, key: str, obj: Obj) -> None:
        values = tuple(self._indexers[name](obj))
        for value in values:
            self._indices[name].setdefault(value, set()).add(key)
        if values and name != NAMESPACE_INDEX:
            self._filed[name][key] = values

    def _unfile_all(self, key: str, obj: Obj) -> None:
        for name in self._indexers:
            if name == NAMESPACE_INDEX:
                values: tuple[str, ...] = tuple(index_by_namespace(obj))  # cheap: no need to remember it
            else:
                values = self._filed[name].pop(key, ())
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

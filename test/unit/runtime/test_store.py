"""The indexed store: keys, the built-in namespace index, custom indexes, and the relist diff."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.runtime.cache import (
    CONTROLLER_OWNER_UID_INDEX,
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    IndexedStore,
    index_by_controller_owner_uid,
    index_by_label,
)
from llmaz_dev.testing.listwatch import obj


def owned(name: str, owner_uid: str, controller: bool = True, **labels: str) -> dict[str, Any]:
    o = obj(name, "1")
    o["metadata"]["ownerReferences"] = [{"uid": owner_uid, "controller": controller, "kind": "X", "name": "x"}]
    o["metadata"]["labels"] = labels
    return o


def test_objects_are_keyed_by_namespace_and_name_or_name_alone_when_cluster_scoped() -> None:
    store = IndexedStore()
    store.upsert(obj("a", "1", namespace="ns1"))
    store.upsert({"metadata": {"name": "node-1", "resourceVersion": "2"}})
    assert sorted(store.keys()) == ["node-1", "ns1/a"]
    assert store.get("ns1/a") is not None
    assert store.get("a") is None


def test_the_namespace_index_is_built_in_and_files_cluster_scoped_objects_under_empty() -> None:
    store = IndexedStore()
    store.upsert(obj("a", "1", namespace="ns1"))
    store.upsert(obj("b", "1", namespace="ns2"))
    store.upsert({"metadata": {"name": "node-1"}})
    assert [o["metadata"]["name"] for o in store.by_index(NAMESPACE_INDEX, "ns1")] == ["a"]
    assert [o["metadata"]["name"] for o in store.by_index(NAMESPACE_INDEX, "")] == ["node-1"]


def test_the_controller_owner_index_ignores_non_controller_references() -> None:
    store = IndexedStore({CONTROLLER_OWNER_UID_INDEX: index_by_controller_owner_uid})
    store.upsert(owned("a", "u1"))
    store.upsert(owned("b", "u1", controller=False))
    store.upsert(owned("c", "u2"))
    assert store.index_keys(CONTROLLER_OWNER_UID_INDEX, "u1") == ["default/a"]
    assert store.index_keys(CONTROLLER_OWNER_UID_INDEX, "u2") == ["default/c"]


def test_an_update_moves_the_object_between_index_values() -> None:
    store = IndexedStore({"app": index_by_label("app")})
    store.upsert(owned("a", "u", app="one"))
    store.upsert(owned("a", "u", app="two"))
    assert store.index_keys("app", "one") == []
    assert store.index_keys("app", "two") == ["default/a"]
    assert store.index_values("app") == ["two"]


def test_a_delete_removes_the_object_from_every_index() -> None:
    store = IndexedStore({"app": index_by_label("app")})
    store.upsert(owned("a", "u", app="one"))
    removed = store.delete("default/a")
    assert removed is not None
    assert store.index_values("app") == []
    assert store.index_values(NAMESPACE_INDEX) == []
    assert store.delete("default/a") is None


def test_indexes_added_later_cover_existing_objects() -> None:
    store = IndexedStore()
    store.upsert(owned("a", "u", app="one"))
    store.add_indexers({"app": index_by_label("app")})
    assert store.index_keys("app", "one") == ["default/a"]
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexers({"app": index_by_label("app")})


def test_asking_for_an_unknown_index_is_an_error() -> None:
    with pytest.raises(KeyError):
        IndexedStore().by_index("nope", "x")


def test_replace_reports_adds_updates_and_tombstones_with_the_last_known_state() -> None:
    store = IndexedStore({"app": index_by_label("app")})
    last_known_b = owned("b", "u", app="old")
    store.upsert(obj("a", "1"))
    store.upsert(last_known_b)
    diff = store.replace([obj("a", "5"), obj("c", "6")])
    assert [o["metadata"]["name"] for o in diff.added] == ["c"]
    assert [(old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"]) for old, new in diff.updated] == [
        ("1", "5")
    ]
    assert diff.deleted == [DeletedFinalStateUnknown("default/b", last_known_b)]
    assert sorted(store.keys()) == ["default/a", "default/c"]
    assert store.index_values("app") == []


def test_replace_with_nothing_empties_the_store() -> None:
    store = IndexedStore()
    store.upsert(obj("a", "1"))
    diff = store.replace([])
    assert len(store) == 0
    assert [t.key for t in diff.deleted] == ["default/a"]


def test_an_index_function_runs_once_per_object_version() -> None:
    # Unfiling the old version uses the values filed for it, not a second call on the old object.
    seen: list[str] = []

    def by_app(o: dict[str, Any]) -> list[str]:
        seen.append(o["metadata"]["resourceVersion"])
        return [o["metadata"]["labels"]["app"]]

    store = IndexedStore({"app": by_app})
    first, second = owned("a", "u", app="one"), owned("a", "u", app="two")
    second["metadata"]["resourceVersion"] = "2"
    store.upsert(first)
    store.upsert(second)
    store.delete("default/a")
    store.replace([first])
    store.replace([])
    assert seen == ["1", "2", "1"]
    assert store.index_values("app") == []
    assert store._filed == {"app": {}}

"""Event handlers: informer events in, Requests out (owner mapping, map functions, tombstones, predicates)."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.runtime.cache.interfaces import DeletedFinalStateUnknown, Obj
from llmaz.runtime.controller import (
    EnqueueHandler,
    Request,
    enqueue_for_object,
    enqueue_for_owner,
    enqueue_mapped,
)
from llmaz.runtime.controller import predicate as p
from llmaz.runtime.resource import Resource

PLAYGROUND = Resource("inference.llmaz.io", "v1alpha1", "playgrounds", "Playground", namespaced=True)
MODEL = Resource("llmaz.io", "v1alpha1", "openmodels", "OpenModel", namespaced=False)


class RecordingQueue:
    def __init__(self) -> None:
        self.added: list[Request] = []

    def add(self, item: Request) -> None:
        self.added.append(item)


def obj(name: str, namespace: str = "ns", owners: list[dict[str, Any]] | None = None, **meta: Any) -> Obj:
    metadata: dict[str, Any] = {"name": name, **meta}
    if namespace:
        metadata["namespace"] = namespace
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata}


def owner_ref(kind: str, name: str, api_version: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}"}
    if controller is not None:
        ref["controller"] = controller
    return ref


def test_enqueue_for_object_enqueues_the_objects_own_key_for_every_event() -> None:
    queue = RecordingQueue()
    handler = EnqueueHandler(enqueue_for_object(), queue)
    handler.on_add(obj("a"), True)
    handler.on_update(obj("a", resourceVersion="1"), obj("a", resourceVersion="2"))
    handler.on_delete(obj("a"))
    assert queue.added == [Request("ns", "a")] * 3


def test_enqueue_for_object_gives_cluster_scoped_objects_a_key_without_namespace() -> None:
    queue = RecordingQueue()
    EnqueueHandler(enqueue_for_object(), queue).on_add(obj("llama", namespace=""), False)
    assert queue.added == [Request("", "llama")]
    assert queue.added[0].key == "llama"


OWNER_CASES = [
    ("controller owner of the kind", [owner_ref("Playground", "pg", "inference.llmaz.io/v1alpha1")], ["pg"]),
    ("any version of the group", [owner_ref("Playground", "pg", "inference.llmaz.io/v1beta9")], ["pg"]),
    (
        "non-controller owner ignored",
        [owner_ref("Playground", "pg", "inference.llmaz.io/v1alpha1", None)],
        [],
    ),
    ("controller: false ignored", [owner_ref("Playground", "pg", "inference.llmaz.io/v1alpha1", False)], []),
    ("other kind", [owner_ref("Service", "pg", "inference.llmaz.io/v1alpha1")], []),
    ("other group", [owner_ref("Playground", "pg", "example.com/v1alpha1")], []),
    ("core group vs named group", [owner_ref("Playground", "pg", "v1")], []),
    (
        "only the controller among several",
        [
            owner_ref("Playground", "plain", "inference.llmaz.io/v1alpha1", None),
            owner_ref("Playground", "boss", "inference.llmaz.io/v1alpha1"),
        ],
        ["boss"],
    ),
    ("no owners", [], []),
]


@pytest.mark.parametrize(("owners", "expected"), [c[1:] for c in OWNER_CASES], ids=[c[0] for c in OWNER_CASES])
def test_enqueue_for_owner_maps_to_the_controller_owner_of_the_given_group_and_kind(
    owners: list[dict[str, Any]], expected: list[str]
) -> None:
    queue = RecordingQueue()
    EnqueueHandler(enqueue_for_owner(PLAYGROUND), queue).on_add(obj("svc", owners=owners), False)
    assert queue.added == [Request("ns", name) for name in expected]


def test_enqueue_for_owner_omits_the_namespace_of_a_cluster_scoped_owner() -> None:
    queue = RecordingQueue()
    owners = [owner_ref("OpenModel", "llama", "llmaz.io/v1alpha1")]
    EnqueueHandler(enqueue_for_owner(MODEL), queue).on_add(obj("cm", owners=owners), False)
    assert queue.added == [Request("", "llama")]


def test_an_update_enqueues_both_the_old_and_the_new_owner_once_each() -> None:
    queue = RecordingQueue()
    handler = EnqueueHandler(enqueue_for_owner(PLAYGROUND), queue)
    old = obj("svc", owners=[owner_ref("Playground", "before", "inference.llmaz.io/v1alpha1")])
    new = obj("svc", owners=[owner_ref("Playground", "after", "inference.llmaz.io/v1alpha1")])
    handler.on_update(old, new)
    handler.on_update(new, new)
    assert queue.added == [Request("ns", "before"), Request("ns", "after"), Request("ns", "after")]


def test_enqueue_mapped_enqueues_what_the_map_function_returns_without_duplicates() -> None:
    queue = RecordingQueue()

    def playgrounds_using(model: Obj) -> list[Request]:
        return [Request("a", "pg1"), Request("b", "pg2"), Request("a", "pg1")]

    EnqueueHandler(enqueue_mapped(playgrounds_using), queue).on_add(obj("llama", namespace=""), False)
    assert queue.added == [Request("a", "pg1"), Request("b", "pg2")]


def test_a_tombstone_is_unwrapped_to_its_last_known_state() -> None:
    queue = RecordingQueue()
    seen: list[Obj] = []

    def remember(o: Obj) -> list[Request]:
        seen.append(o)
        return []

    last_known = obj("svc", owners=[owner_ref("Playground", "pg", "inference.llmaz.io/v1alpha1")])
    EnqueueHandler(enqueue_for_owner(PLAYGROUND), queue).on_delete(DeletedFinalStateUnknown("ns/svc", last_known))
    EnqueueHandler(enqueue_mapped(remember), queue).on_delete(DeletedFinalStateUnknown("ns/svc", last_known))
    assert queue.added == [Request("ns", "pg")]
    assert seen == [last_known]


@pytest.mark.parametrize(("key", "expected"), [("ns/gone", Request("ns", "gone")), ("gone", Request("", "gone"))])
def test_a_tombstone_without_state_still_enqueues_the_key_it_names(key: str, expected: Request) -> None:
    queue = RecordingQueue()
    EnqueueHandler(enqueue_for_object(), queue).on_delete(DeletedFinalStateUnknown(key, {}))
    assert queue.added == [expected]


def test_predicates_filter_each_event_type_before_mapping() -> None:
    queue = RecordingQueue()
    handler = EnqueueHandler(enqueue_for_object(), queue, [p.generation_changed(), p.in_namespaces("ns")])
    handler.on_update(obj("status-only", generation=1), obj("status-only", generation=1))
    handler.on_update(obj("spec", generation=1), obj("spec", generation=2))
    handler.on_add(obj("elsewhere", namespace="other"), False)
    handler.on_delete(DeletedFinalStateUnknown("other/x", obj("x", namespace="other")))
    handler.on_delete(DeletedFinalStateUnknown("ns/y", {}))
    assert queue.added == [Request("ns", "spec"), Request("ns", "y")]


def test_a_failing_map_function_is_logged_and_never_raised_into_the_informer() -> None:
    queue = RecordingQueue()

    def broken(o: Obj) -> list[Request]:
        raise KeyError("spec")

    handler = EnqueueHandler(enqueue_mapped(broken), queue)
    with capture_logs() as logs:
        handler.on_add(obj("a"), False)
        handler.on_update(obj("a"), obj("a"))
        handler.on_delete(obj("a"))
    assert queue.added == []
    assert [(log["event"], log["log_level"]) for log in logs] == [("Event handler error", "error")] * 3
    assert [log["event_type"] for log in logs] == ["create", "update", "delete"]

"""Predicates, as tables of (predicate, event) -> passes."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.runtime.cache.interfaces import Obj
from llmaz.runtime.controller import predicate as p
from llmaz.runtime.controller.predicate import Predicate


def obj(
    name: str = "a",
    namespace: str = "ns",
    generation: int = 1,
    rv: str = "1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: Any = None,
) -> Obj:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "generation": generation,
        "resourceVersion": rv,
    }
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "status": status} if status is not None else {"metadata": meta}


UPDATE_CASES = [
    ("generation bumped", p.generation_changed(), obj(generation=1), obj(generation=2), True),
    ("generation same", p.generation_changed(), obj(rv="1"), obj(rv="2"), False),
    ("rv changed", p.resource_version_changed(), obj(rv="1"), obj(rv="2"), True),
    ("resync (same rv)", p.resource_version_changed(), obj(rv="1"), obj(rv="1"), False),
    (
        "status changed deep",
        p.status_changed(),
        obj(status={"c": [{"s": "F"}]}),
        obj(status={"c": [{"s": "T"}]}),
        True,
    ),
    (
        "status equal deep",
        p.status_changed(),
        obj(status={"c": [{"s": "T"}]}),
        obj(status={"c": [{"s": "T"}]}),
        False,
    ),
    ("status appears", p.status_changed(), obj(), obj(status={"phase": "Ready"}), True),
    ("label added", p.labels_changed(), obj(), obj(labels={"x": "1"}), True),
    ("labels none vs empty", p.labels_changed(), obj(), obj(labels={}), False),
    (
        "annotation changed",
        p.annotations_changed(),
        obj(annotations={"a": "1"}),
        obj(annotations={"a": "2"}),
        True,
    ),
    (
        "annotations same",
        p.annotations_changed(),
        obj(annotations={"a": "1"}),
        obj(annotations={"a": "1"}),
        False,
    ),
]


@pytest.mark.parametrize(
    ("predicate", "old", "new", "passes"),
    [case[1:] for case in UPDATE_CASES],
    ids=[case[0] for case in UPDATE_CASES],
)
def test_change_predicates_filter_updates(predicate: Predicate, old: Obj, new: Obj, passes: bool) -> None:
    assert predicate.update(old, new) is passes


@pytest.mark.parametrize(
    "predicate",
    [p.generation_changed(), p.resource_version_changed(), p.status_changed(), p.labels_changed()],
)
def test_change_predicates_let_creates_and_deletes_through(predicate: Predicate) -> None:
    assert predicate.create(obj())
    assert predicate.delete(obj())


SELECTOR_CASES = [
    ({}, {"app": "x"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "x", "tier": "a"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "y"}, False),
    ({"matchLabels": {"app": "x"}}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}, {"tier": "c"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {"tier": "a"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": ""}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "a"}, False),
    (
        {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        {"app": "x"},
        False,
    ),
]


@pytest.mark.parametrize(("selector", "labels", "passes"), SELECTOR_CASES)
def test_label_selector_applies_to_every_event_type(
    selector: dict[str, Any], labels: dict[str, str], passes: bool
) -> None:
    predicate = p.label_selector(selector)
    target = obj(labels=labels)
    assert predicate.create(target) is passes
    assert predicate.delete(target) is passes
    assert predicate.update(obj(), target) is passes


def test_label_selector_rejects_an_unknown_operator() -> None:
    with pytest.raises(ValueError, match="Gt"):
        p.label_selector({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})


@pytest.mark.parametrize(
    ("predicate", "target", "passes"),
    [
        (p.in_namespaces("ns", "other"), obj(namespace="other"), True),
        (p.in_namespaces("ns"), obj(namespace="kube-system"), False),
        (p.named("a"), obj(name="a", namespace="anywhere"), True),
        (p.named("a", namespace="ns"), obj(name="a", namespace="other"), False),
        (p.named("a"), obj(name="b"), False),
    ],
)
def test_name_and_namespace_filters(predicate: Predicate, target: Obj, passes: bool) -> None:
    assert predicate.create(target) is passes
    assert predicate.update(obj(), target) is passes
    assert predicate.delete(target) is passes


def test_object_predicates_judge_an_update_by_its_new_object() -> None:
    predicate = p.named("new")
    assert predicate.update(obj(name="old"), obj(name="new"))
    assert not predicate.update(obj(name="new"), obj(name="old"))


def test_predicates_can_differ_per_event_type() -> None:
    only_deletes = Predicate(create=lambda o: False, update=lambda old, new: False)
    assert not only_deletes.create(obj())
    assert not only_deletes.update(obj(), obj())
    assert only_deletes.delete(obj())


COMBINATOR_CASES = [
    ("and: both pass", p.and_(p.generation_changed(), p.labels_changed()), (1, {"x": "1"}), True),
    ("and: one fails", p.and_(p.generation_changed(), p.labels_changed()), (1, None), False),
    ("or: one passes", p.or_(p.generation_changed(), p.labels_changed()), (0, {"x": "1"}), True),
    ("or: none passes", p.or_(p.generation_changed(), p.labels_changed()), (0, None), False),
    ("not: inverts", p.not_(p.generation_changed()), (0, None), True),
    ("not: inverts a pass", p.not_(p.generation_changed()), (1, None), False),
]


@pytest.mark.parametrize(
    ("predicate", "change", "passes"),
    [case[1:] for case in COMBINATOR_CASES],
    ids=[case[0] for case in COMBINATOR_CASES],
)
def test_combinators(predicate: Predicate, change: tuple[int, dict[str, str] | None], passes: bool) -> None:
    generation_bump, labels = change
    old = obj(generation=1)
    new = obj(generation=1 + generation_bump, labels=labels)
    assert predicate.update(old, new) is passes


def test_not_also_inverts_the_default_passes() -> None:
    assert not p.not_(p.generation_changed()).create(obj())


def test_and_or_apply_per_event_type() -> None:
    creates_only_in_ns = p.and_(p.in_namespaces("ns"), Predicate(delete=lambda o: False))
    assert creates_only_in_ns.create(obj(namespace="ns"))
    assert not creates_only_in_ns.create(obj(namespace="x"))
    assert not creates_only_in_ns.delete(obj(namespace="ns"))
    either = p.or_(Predicate(create=lambda o: False), Predicate(create=lambda o: o["metadata"]["name"] == "a"))
    assert either.create(obj(name="a"))
    assert not either.create(obj(name="b"))

"""Predicates: filters that decide whether an informer event may enqueue anything.

A `Predicate` has one check per event type. Each defaults to "pass", so a predicate about changes
(`generation_changed`, `status_changed`, ...) filters only updates, while one about the object itself
(`label_selector`, `in_namespaces`, `named`, `for_objects`) applies to every event (for an update, to the new
object). A watch passes an event only if all its predicates pass it. Deletes seen through a tombstone are
checked against the tombstone's last known state.

Checks receive cache objects and must not change them.

WARNING: `generation_changed` assumes `metadata.generation` moves exactly when the spec does. That holds for
custom resources with a status subresource, but objects without a generation (ConfigMaps, Secrets) never
pass it, and some built-in kinds bump the generation for other reasons (Deployments on annotation changes).
It also hides status-only updates, which is the point for a primary object and a trap for an owned one whose
status the controller reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmaz.runtime.cache.interfaces import Obj

ObjectCheck = Callable[[Obj], bool]
UpdateCheck = Callable[[Obj, Obj], bool]


def _pass(obj: Obj) -> bool:
    return True


def _pass_update(old: Obj, new: Obj) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Predicate:
    """Per-event-type checks; any left out passes every event of that type."""

    create: ObjectCheck = _pass
    update: UpdateCheck = _pass_update
    delete: ObjectCheck = _pass


def for_objects(check: ObjectCheck) -> Predicate:
    """Apply `check` to every event's object (for updates, the new object)."""
    return Predicate(create=check, update=lambda old, new: check(new), delete=check)


def _metadata(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _changed(field: str) -> Predicate:
    return Predicate(update=lambda old, new: _metadata(old).get(field) != _metadata(new).get(field))


def generation_changed() -> Predicate:
    """Pass updates whose `metadata.generation` changed (spec changes; see the module WARNING)."""
    return _changed("generation")


def resource_version_changed() -> Predicate:
    """Pass updates whose `metadata.resourceVersion` changed, dropping the informer's periodic resyncs."""
    return _changed("resourceVersion")


def labels_changed() -> Predicate:
    """Pass updates whose labels changed."""
    return Predicate(update=lambda old, new: _labels(old) != _labels(new))


def annotations_changed() -> Predicate:
    """Pass updates whose annotations changed."""
    return Predicate(update=lambda old, new: _annotations(old) != _annotations(new))


def status_changed() -> Predicate:
    """Pass updates whose `status` differs (compared deeply)."""
    return Predicate(update=lambda old, new: old.get("status") != new.get("status"))


def _labels(obj: Obj) -> Mapping[str, str]:
    return _metadata(obj).get("labels") or {}


def _annotations(obj: Obj) -> Mapping[str, str]:
    return _metadata(obj).get("annotations") or {}


def in_namespaces(*namespaces: str) -> Predicate:
    """Pass events for objects in one of `namespaces`."""
    allowed = frozenset(namespaces)
    return for_objects(lambda obj: _metadata(obj).get("namespace", "") in allowed)


def named(name: str, namespace: str | None = None) -> Predicate:
    """Pass events for the object called `name` (in `namespace`, when given)."""

    def matches(obj: Obj) -> bool:
        meta = _metadata(obj)
        return meta.get("name") == name and (namespace is None or meta.get("namespace", "") == namespace)

    return for_objects(matches)


def label_selector(selector: Mapping[str, Any]) -> Predicate:
    """Pass events for objects whose labels match a metav1.LabelSelector-shaped dict.

    Supports `matchLabels` and `matchExpressions` with In, NotIn, Exists and DoesNotExist. An empty selector
    matches every object. Raises ValueError for an unknown operator.
    """
    requirements = _requirements(selector)
    return for_objects(lambda obj: all(requirement(_labels(obj)) for requirement in requirements))


LabelRequirement = Callable[[Mapping[str, str]], bool]


def _requirements(selector: Mapping[str, Any]) -> list[LabelRequirement]:
    requirements: list[LabelRequirement] = [
        _requirement(key, "In", [value]) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        requirements.append(_requirement(expression["key"], expression["operator"], expression.get("values") or []))
    return requirements


def _requirement(key: str, operator: str, values: Iterable[str]) -> LabelRequirement:
    allowed = frozenset(values)
    if operator == "In":
        return lambda labels: key in labels and labels[key] in allowed
    if operator == "NotIn":
        return lambda labels: key not in labels or labels[key] not in allowed
    if operator == "Exists":
        return lambda labels: key in labels
    if operator == "DoesNotExist":
        return lambda labels: key not in labels
    raise ValueError(f"unknown label selector operator {operator!r}")


def and_(*predicates: Predicate) -> Predicate:
    """Pass an event only if every predicate passes it."""
    return Predicate(
        create=lambda obj: all(p.create(obj) for p in predicates),
        update=lambda old, new: all(p.update(old, new) for p in predicates),
        delete=lambda obj: all(p.delete(obj) for p in predicates),
    )


def or_(*predicates: Predicate) -> Predicate:
    """Pass an event if any predicate passes it."""
    return Predicate(
        create=lambda obj: any(p.create(obj) for p in predicates),
        update=lambda old, new: any(p.update(old, new) for p in predicates),
        delete=lambda obj: any(p.delete(obj) for p in predicates),
    )


def not_(predicate: Predicate) -> Predicate:
    """Invert every check, including the default passes: `not_(generation_changed())` rejects creates."""
    return Predicate(
        create=lambda obj: not predicate.create(obj),
        update=lambda old, new: not predicate.update(old, new),
        delete=lambda obj: not predicate.delete(obj),
    )

"""Namespaces are tenants: which namespace's claimants a model name is routed to, shared by the Playground
controller (which tells the others) and llmaz-gateway (which routes by it)."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import constants as c
from llmaz.apis.serving import model_name_taken, owning_namespace, routed_namespaces, serves_across_namespaces


def _claimant(namespace: str, created: str | None, name: str = "pg") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "spec": {"modelClaim": {"modelName": "m"}}}


def _open_model(annotation: str | None) -> dict[str, Any]:
    annotations = {} if annotation is None else {c.SERVE_ACROSS_NAMESPACES_ANNOTATION: annotation}
    return {"metadata": {"name": "m", "annotations": annotations}}


T1, T2, T3 = "2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z", "2026-11-28T12:00:00Z"


@pytest.mark.parametrize(
    ("claimants", "owner"),
    [
        ([], None),
        ([("a", T1)], "a"),
        ([("b", T1), ("a", T2)], "b"),  # the oldest wins, whatever the names
        ([("a", T2), ("b", T1)], "b"),  # whatever the order listed
        ([("b", T1), ("a", T1)], "a"),  # a tie goes to the namespace first by name
        ([("a", T3), ("b", T2), ("a", T1)], "a"),  # any claimant of a namespace counts, the oldest decides
        ([("a", None), ("b", T3)], "b"),  # an object without a creation time counts as the newest
        ([("b", "2026-11-28T11:00:00+01:00"), ("a", "2026-11-28T10:30:00Z")], "b"),  # times compared as instants
        ([("", T1), ("b", T2)], "b"),  # an object without a namespace claims nothing
    ],
)
def test_the_namespace_of_the_oldest_claimant_owns_the_model_name(
    claimants: list[tuple[str, str | None]], owner: str | None
) -> None:
    assert owning_namespace(_claimant(ns, created) for ns, created in claimants) == owner


@pytest.mark.parametrize(
    ("annotation", "across"),
    [(None, False), ("true", True), ("false", False), ("True", False), ("yes", False), ("", False)],
)
def test_only_an_exact_true_on_the_open_model_pools_namespaces(annotation: str | None, across: bool) -> None:
    assert serves_across_namespaces(_open_model(annotation)) is across


def test_a_missing_open_model_pools_nothing() -> None:
    assert serves_across_namespaces(None) is False


@pytest.mark.parametrize(
    ("open_model", "routed", "taken"),
    [
        (None, {"a"}, {"b", "c"}),
        (_open_model("false"), {"a"}, {"b", "c"}),
        (_open_model("true"), {"a", "b", "c"}, set()),
    ],
)
def test_other_namespaces_claimants_are_routed_only_with_the_opt_in(
    open_model: dict[str, Any] | None, routed: set[str], taken: set[str]
) -> None:
    claimants = [_claimant("b", T2), _claimant("a", T1), _claimant("c", T3), _claimant("a", T3, "second")]
    assert routed_namespaces(claimants, open_model) == routed
    assert {ns for ns in "abc" if model_name_taken(ns, claimants, open_model)} == taken


def test_when_the_owner_goes_the_next_oldest_namespace_owns_the_name() -> None:
    first, second = _claimant("a", T1), _claimant("b", T2)
    assert model_name_taken("b", [first, second], None)
    assert not model_name_taken("b", [second], None)

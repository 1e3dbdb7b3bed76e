"""Merges of envs, resources and string maps, all in a stable order.

Invariants:
- Nothing here mutates its inputs; results are fresh lists and dicts.
- Env merges keep the base order, replace overridden entries in place and append new names in their order, so the
  same inputs always give the same list (llmaz iterated a Go map: random order, spurious rollouts).
- Quantities in results are strings (`4` -> `"4"`), as a Go client sends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from llmaz.apis.base import ResourceRequirements
from llmaz.apis.quantity import parse_quantity

JsonValue = TypeVar("JsonValue")

# Only these resources get their limit raised to a larger request; accelerators are left as given.
LIMIT_RAISED_RESOURCES = ("cpu", "memory")


def json_copy(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON value (dicts with string keys, lists, strings, numbers, booleans, None), as the API
    server and the API models give them: a few times faster than `copy.deepcopy`, which every reconcile pays for
    each pod template it renders."""
    copied: JsonValue = orjson.loads(orjson.dumps(value))
    return copied


def quantity_text(value: int | str) -> str:
    return str(value)


def merge_envs(base: Iterable[Mapping[str, Any]] | None, overrides: Iterable[Mapping[str, Any]] | None) -> list[Any]:
    """Union of two env lists by name; `overrides` win, keeping the base position of the names they replace."""
    merged: dict[str, Any] = {}
    for env in [*(base or ()), *(overrides or ())]:
        merged[env["name"]] = json_copy(dict(env))
    return list(merged.values())


def merge_kvs(to_merge: Mapping[str, str] | None, to_be_merged: Mapping[str, str] | None) -> dict[str, str] | None:
    """`to_merge` with every key of `to_be_merged` set over it; None only when both are empty (llmaz's MergeKVs)."""
    if not to_merge and not to_be_merged:
        return dict(to_merge) if to_merge is not None else None
    return {**(to_merge or {}), **(to_be_merged or {})}


def _quantities(resources: Mapping[str, int | str] | None) -> dict[str, str]:
    return {name: quantity_text(value) for name, value in (resources or {}).items()}


def _with_missing(preferred: dict[str, str], fallback: dict[str, str]) -> dict[str, str]:
    return {**preferred, **{name: value for name, value in fallback.items() if name not in preferred}}


def merge_resources(
    recommended: ResourceRequirements | None, override: ResourceRequirements | None
) -> dict[str, dict[str, str]]:
    """Container resources: `override` key by key over `recommended`, cpu/memory limits raised to their requests.

    Empty maps are left out, so no resources at all gives `{}`.
    """
    base = recommended or ResourceRequirements()
    requests, limits = _quantities(base.requests), _quantities(base.limits)
    if override is not None:
        requests = _with_missing(_quantities(override.requests), requests)
        limits = _with_missing(_quantities(override.limits), limits)
        for name in LIMIT_RAISED_RESOURCES:
            if name in requests and name in limits and parse_quantity(requests[name]) > parse_quantity(limits[name]):
                limits[name] = requests[name]
    merged: dict[str, dict[str, str]] = {}
    if requests:
        merged["requests"] = requests
    if limits:
        merged["limits"] = limits
    return merged


def append_absent(items: list[Any], additions: Sequence[Mapping[str, Any]], key: str = "name") -> None:
    """Append each addition whose `key` is not yet in `items` (list-map keys must stay unique for apply)."""
    present = {item.get(key) for item in items}
    for addition in additions:
        if addition.get(key) not in present:
            items.append(json_copy(dict(addition)))
            present.add(addition.get(key))

"""Building blocks for informer transforms (client-go's TransformFunc): keep only what the readers of a cache read.

A transform runs once per object as it arrives (`SharedInformer.set_transform`, or `SharedInformerFactory.configure`
for every informer of a resource), before the store and any handler see it. It must keep `metadata.name` and
`metadata.namespace` (the key) and return a new dict rather than change its argument; the helpers here copy only
what they change (nested values are shared with the decoded object, which nobody else holds).

WARNING: a transform decides what every reader of the cache can see, including readers added later. Write down
next to it who reads the cache and what, and check that list when adding one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import orjson

from llmaz.runtime.cache.interfaces import Obj

Transform = Callable[[Obj], Obj]
ManagedFieldsFilter = Callable[[dict[str, Any]], bool]
# Paths to keep: a key mapped to True keeps its whole value, to a nested Paths keeps those keys of a mapping (or of
# each mapping in a list).
Paths = Mapping[str, "bool | Paths"]

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def applied_by(manager: str) -> ManagedFieldsFilter:
    """Selects the managedFields entry of `manager`'s server-side applies (what an apply no-op check reads)."""

    def select(entry: dict[str, Any]) -> bool:
        return entry.get("manager") == manager and entry.get("operation") == "Apply"

    return select


def strip_metadata(
    *,
    keep_managed_fields: ManagedFieldsFilter | None = None,
    drop_annotations: Collection[str] = (LAST_APPLIED_ANNOTATION,),
) -> Transform:
    """Drop `metadata.managedFields` (every entry, or those `keep_managed_fields` does not select) and the named
    annotations: together often most of a small object's size, and read by no controller.

    A kept entry holds its `fieldsV1` as compact JSON text, the raw form Go's `FieldsV1` keeps: decoded, the field
    set of a pod template is a tree of hundreds of small dicts, about eight times the memory of its text, and it is
    read only by an apply no-op check (`runtime.client.applycheck` takes either form).
    """
    dropped = frozenset(drop_annotations)

    def transform(obj: Obj) -> Obj:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return obj
        meta = dict(meta)
        kept = [
            _raw_fields(entry)
            for entry in meta.pop("managedFields", None) or ()
            if keep_managed_fields and keep_managed_fields(entry)
        ]
        if kept:
            meta["managedFields"] = kept
        annotations = meta.get("annotations")
        if annotations and dropped.intersection(annotations):
            remaining = {k: v for k, v in annotations.items() if k not in dropped}
            if remaining:
                meta["annotations"] = remaining
            else:
                del meta["annotations"]
        return {**obj, "metadata": meta}

    return transform


def _raw_fields(entry: dict[str, Any]) -> dict[str, Any]:
    fields = entry.get("fieldsV1")
    if not isinstance(fields, dict):
        return entry
    return {**entry, "fieldsV1": orjson.dumps(fields).decode()}


def drop_fields(*keys: str) -> Transform:
    """Drop top-level fields (e.g. "status" where nobody reads it)."""
    dropped = frozenset(keys)

    def transform(obj: Obj) -> Obj:
        return {k: v for k, v in obj.items() if k not in dropped}

    return transform


def keep_paths(paths: Paths) -> Transform:
    """Keep only `paths` of each object (see `Paths`); everything else is dropped."""

    def transform(obj: Obj) -> Obj:
        projected: Obj = _project(obj, paths)
        return projected

    return transform


def _project(value: Any, paths: Paths) -> Any:
    if isinstance(value, list):
        return [_project(item, paths) for item in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, sub in paths.items():
        if key in value:
            kept[key] = value[key] if sub is True else _project(value[key], sub) if sub else None
    return {k: v for k, v in kept.items() if v is not None}


def chain(*transforms: Transform) -> Transform:
    """Apply `transforms` in order."""

    def transform(obj: Obj) -> Obj:
        for step in transforms:
            obj = step(obj)
        return obj

    return transform

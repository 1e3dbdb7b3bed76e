"""Common index functions. Each maps an object to the index values it is filed under (possibly none)."""

from __future__ import annotations

from llmaz.runtime.cache.interfaces import IndexFunc, Obj

NAMESPACE_INDEX = "namespace"
CONTROLLER_OWNER_UID_INDEX = "controller-owner-uid"


def index_by_namespace(obj: Obj) -> list[str]:
    """The object's namespace ("" for cluster-scoped objects, so they are listed together)."""
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def index_by_controller_owner_uid(obj: Obj) -> list[str]:
    """The uid of the ownerReference with `controller: true`, if any (there is at most one)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return [str(ref["uid"])]
    return []


def index_by_label(key: str) -> IndexFunc:
    """An index function filing objects under the value of label `key` (objects without it are not filed)."""

    def index(obj: Obj) -> list[str]:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        value = labels.get(key)
        return [str(value)] if value is not None else []

    index.__name__ = f"index_by_label_{key}"
    return index

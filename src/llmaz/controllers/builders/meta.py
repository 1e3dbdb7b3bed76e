"""Object metadata shared by every builder: controller owner references, the managed-by label, apply-ready cleaning.

Invariants: `apply_ready` output has no `None` values and no `creationTimestamp` key at any depth (llmaz dropped
them before every apply too), and it never reorders keys or list items. Every child carries
`app.kubernetes.io/managed-by: llmaz`: the manager's informers for core Services, HPAs and LeaderWorkerSets select
on it, so a child without it is invisible to them until the next apply, which adds it.
"""

from __future__ import annotations

from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.base import ObjectMeta


def controller_reference(owner_api_version: str, owner_kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReference that makes the owner the controller and lets garbage collection block on the child."""
    return {
        "apiVersion": owner_api_version,
        "kind": owner_kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_metadata(
    name: str, owner: ObjectMeta, owner_api_version: str, owner_kind: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """Metadata of a child in the owner's namespace, controlled by the owner (whose uid must be known), labelled
    as managed by llmaz."""
    if not owner.name or not owner.uid:
        raise ValueError(f"{owner_kind} needs a name and a uid to own objects")
    labels = {c.MANAGED_BY_LABEL: c.MANAGED_BY}
    metadata: dict[str, Any] = {"name": name, "namespace": owner.namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [controller_reference(owner_api_version, owner_kind, owner.name, owner.uid)]
    return metadata


def apply_ready(value: Any) -> Any:
    """A copy of `value` without `None` values and without `creationTimestamp` keys, at any depth."""
    if isinstance(value, dict):
        return {
            key: apply_ready(item) for key, item in value.items() if item is not None and key != "creationTimestamp"
        }
    if isinstance(value, list):
        return [apply_ready(item) for item in value if item is not None]
    return value

"""Whether a reconciler may write a child over the object that already holds the child's name.

Children (a Playground's inference Service and HPA, a Service's LeaderWorkerSet and `<name>-lb` Service) are
written with server-side apply and `force`, which takes over whatever object has the name. llmaz applied
unconditionally: a user's object of that name was adopted (and later garbage-collected with its new owner), or
llmaz and another controller rewrote it in turn forever. The rule, decided on the cached child before any write:

- no such object, or one whose controller ownerReference carries the owner's uid: write it;
- one controlled by an earlier object of the owner's kind and name: write it (adopt it). Names are unique, so
  that owner is gone, and the object is a leftover of it waiting for garbage collection;
- anything else (another controller, or no controller owner at all): a `Conflict`. The reconciler writes
  nothing, reports `Progressing=False`/`AbortProcessing` with `ChildConflictError`'s message, and retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmaz.apis import Playground, Service
from llmaz.apis import constants as c
from llmaz.controllers.builders.errors import BuildError


@dataclass(frozen=True, slots=True)
class Conflict:
    """An existing `kind` `namespace/name` that the owner may not take over; `holder` is its controller, if any."""

    kind: str
    namespace: str
    name: str
    holder: str | None

    @property
    def message(self) -> str:
        held = f"is controlled by {self.holder}" if self.holder else "has no controller owner"
        return f"{self.kind} {self.namespace}/{self.name} {held}"


class ChildConflictError(BuildError):
    """Children exist that the owner does not control; `lead` replaces the generic start of the message."""

    def __init__(self, owner: Playground | Service, conflicts: Sequence[Conflict], lead: str | None = None) -> None:
        details = "; ".join(conflict.message for conflict in conflicts)
        owner_label = kind_label(owner.GROUP, owner.KIND)
        generic = c.MESSAGE_CHILD_CONFLICT.format(owner=owner_label, conflicts=details)
        super().__init__(generic if lead is None else f"{lead}: {details}")
        self.conflicts = tuple(conflicts)


def kind_label(group: str, kind: str) -> str:
    """How messages name a kind: llmaz's Service is the "inference Service", beside core Services."""
    return f"inference {kind}" if group == c.INFERENCE_GROUP and kind == Service.KIND else kind


def ownership_conflict(owner: Playground | Service, kind: str, live: dict[str, Any] | None) -> Conflict | None:
    """Why the live child `live` (of `kind`, as messages name it) may not be written for `owner`, or None."""
    if live is None:
        return None
    meta = live.get("metadata") or {}
    ref = _controller_ref(meta)
    if ref is not None and (ref.get("uid") == owner.metadata.uid or _earlier_self(ref, owner)):
        return None
    holder = None
    if ref is not None:
        holder = f"{kind_label(_group(str(ref.get('apiVersion') or '')), str(ref.get('kind')))} {ref.get('name')}"
    return Conflict(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), holder)


def _controller_ref(meta: dict[str, Any]) -> dict[str, Any] | None:
    refs = meta.get("ownerReferences") or []
    return next((ref for ref in refs if isinstance(ref, dict) and ref.get("controller") is True), None)


def _earlier_self(ref: dict[str, Any], owner: Playground | Service) -> bool:
    """Whether `ref` names an earlier object of the owner's kind and name (a deleted one: the name is taken now)."""
    same_kind = ref.get("kind") == owner.KIND and _group(str(ref.get("apiVersion") or "")) == owner.GROUP
    return same_kind and ref.get("name") == owner.metadata.name


def _group(api_version: str) -> str:
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""

"""Identity of an API resource: what informers, clients and controllers agree on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    """A group/version/resource with the facts needed to build URLs and keys.

    `group` is "" for the core API. `namespaced` decides both the URL shape and whether object keys carry a
    namespace.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvr(self) -> str:
        """ "group/version/plural" ("v1/services" for the core group), as people name a resource in messages."""
        return f"{self.api_version}/{self.plural}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.version}.{self.group}" if self.group else f"{self.plural}.{self.version}"


def object_key(obj: dict[str, object]) -> str:
    """client-go's MetaNamespaceKeyFunc: "namespace/name", or "name" for cluster-scoped objects."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValueError("object has no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str, str]:
    """Inverse of object_key: ("namespace", "name"), with "" as namespace for cluster-scoped keys."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else ("", namespace)

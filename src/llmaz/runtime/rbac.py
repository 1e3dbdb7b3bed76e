"""RBAC rules declared next to the code that needs them, merged and rendered into Roles and ClusterRoles.

A module that calls the API declares what it calls as a module-level `RBAC_RULES: tuple[PolicyRule, ...]`;
`llmaz_dev.rbacgen` collects them (from an explicit list of modules, never by import side effect) into the
manifests under `config/rbac`. Keeping each rule beside its call makes a new call without a rule, or a rule
without a call, visible in review.

Invariants:
- A rule names one API group, or non-resource URLs; verbs are never empty.
- `own_namespace` rules apply only in the manager's namespace (rendered into a Role); others are cluster-wide
  (a ClusterRole). Non-resource URLs exist only cluster-wide.
- `resource_names` never restricts `create` (the API server cannot: the name is not known before the request)
  nor `deletecollection`; a `list`/`watch` so restricted works only with a `metadata.name` field selector.
- Rendering is deterministic: verbs are unioned per (scope, group, resource, names), resources with equal
  verbs and names are grouped, everything is sorted; the same rules always yield the same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmaz.runtime.resource import Resource

READ = ("get", "list", "watch")
_UNNAMEABLE_VERBS = frozenset({"create", "deletecollection"})


@dataclass(frozen=True, slots=True)
class PolicyRule:
    api_group: str = ""
    resources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    own_namespace: bool = False

    def __post_init__(self) -> None:
        if not self.verbs:
            raise ValueError("a policy rule needs verbs")
        if bool(self.resources) == bool(self.non_resource_urls):
            raise ValueError("a policy rule names either resources or non-resource URLs")
        if self.non_resource_urls and (self.own_namespace or self.api_group or self.resource_names):
            raise ValueError("non-resource URLs are cluster-wide and have no group or names")
        if self.resource_names and _UNNAMEABLE_VERBS.intersection(self.verbs):
            raise ValueError(f"resource names cannot restrict {sorted(_UNNAMEABLE_VERBS)}")

    def manifest(self) -> dict[str, Any]:
        """The rule as it appears in a Role or ClusterRole."""
        if self.non_resource_urls:
            return {"nonResourceURLs": list(self.non_resource_urls), "verbs": list(self.verbs)}
        rule: dict[str, Any] = {"apiGroups": [self.api_group], "resources": list(self.resources)}
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        rule["verbs"] = list(self.verbs)
        return rule


def allow(
    resource: Resource,
    *verbs: str,
    subresource: str | None = None,
    names: tuple[str, ...] = (),
    own_namespace: bool = False,
) -> PolicyRule:
    """`verbs` on `resource` (or one of its subresources), optionally only on the named objects."""
    plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
    return PolicyRule(resource.group, (plural,), verbs, names, own_namespace=own_namespace)


def allow_urls(*urls: str, verbs: tuple[str, ...] = ("get",)) -> PolicyRule:
    return PolicyRule(non_resource_urls=urls, verbs=verbs)


def merge(rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """The same permissions as `rules`, in the fewest, sorted rules (see the module invariants)."""
    verbs: dict[tuple[bool, str, str, tuple[str, ...], bool], set[str]] = defaultdict(set)
    for rule in rules:
        for item in rule.resources or rule.non_resource_urls:
            key = (rule.own_namespace, rule.api_group, item, tuple(sorted(rule.resource_names)), bool(rule.resources))
            verbs[key].update(rule.verbs)
    grouped: dict[tuple[bool, str, tuple[str, ...], bool, tuple[str, ...]], list[str]] = defaultdict(list)
    for (scope, group, item, names, is_resource), allowed in verbs.items():
        grouped[(scope, group, names, is_resource, tuple(sorted(allowed)))].append(item)
    merged = [
        PolicyRule(group, tuple(sorted(items)), allowed, names, own_namespace=scope)
        if is_resource
        else PolicyRule(non_resource_urls=tuple(sorted(items)), verbs=allowed)
        for (scope, group, names, is_resource, allowed), items in grouped.items()
    ]
    return sorted(merged, key=_sort_key)


def _sort_key(rule: PolicyRule) -> tuple[Any, ...]:
    return (not rule.non_resource_urls, rule.api_group, rule.resources, rule.resource_names, rule.non_resource_urls)


def allows(
    rules: Iterable[PolicyRule], group: str, resource: str, verb: str, *, own_namespace: bool, name: str | None = None
) -> bool:
    """Whether `rules` grant `verb` on `group`/`resource` (in the manager's namespace or cluster-wide).

    Cluster-wide rules also grant in the manager's namespace; a named rule grants only for that `name`.
    """
    for rule in rules:
        if rule.api_group != group or resource not in rule.resources or verb not in rule.verbs:
            continue
        if rule.own_namespace and not own_namespace:
            continue
        if not rule.resource_names or (name is not None and name in rule.resource_names):
            return True
    return False


def role_manifests(name: str, rules: Iterable[PolicyRule], namespace: str = "system") -> list[dict[str, Any]]:
    """A ClusterRole for the cluster-wide rules and a Role (in `namespace`) for the others, each only if needed."""
    merged = merge(rules)
    cluster = [r.manifest() for r in merged if not r.own_namespace]
    local = [r.manifest() for r in merged if r.own_namespace]
    manifests: list[dict[str, Any]] = []
    if cluster:
        manifests.append(_role("ClusterRole", {"name": name}, cluster))
    if local:
        manifests.append(_role("Role", {"name": name, "namespace": namespace}, local))
    return manifests


def _role(kind: str, metadata: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}

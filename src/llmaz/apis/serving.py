"""What a Playground or an inference Service serves, as the controllers build it and the gateway routes it.

- The main model: the claims in llmaz's order (`main_first`: each claim whose role is unset or `main` is put
  first, any other is appended, so the last main claim leads and a draft follows it), and the main model is the
  first of that order. A Playground's `spec.modelClaim` is one main model and wins over `spec.modelClaims`.
- The engines of an inference Service (a Playground's is named after it) are behind the core Service
  `<name>-lb`, which the Service controller makes and the gateway routes to.
- Tenancy: a model name is routed to the claimants (Playgrounds and inference Services whose main model it is) of
  one namespace, the one that claimed it first (`owning_namespace`), unless its OpenModel opts in to pooling every
  namespace (`serves_across_namespaces`). The controllers tell the other claimants (`model_name_taken`); the
  gateway routes by the same rule (`routed_namespaces`). See docs/tenancy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from llmaz.apis import constants as c
from llmaz.runtime.timestamp import parse_timestamp

LB_SERVICE_SUFFIX: Final = "-lb"

# The names derived from an inference Service's (or Playground's) name `<name>`, each limited to 63 characters (a
# DNS-1035 label for Services, a label value for the pod label): the `-lb` Service `<name>-lb`; the LeaderWorkerSet,
# its headless Service and leader StatefulSet `<name>`, whose pods `<name>-<group>` carry the StatefulSet label
# `controller-revision-hash: <name>-<hash>` (a hash of up to 10 characters); on a multi-host Service, a worker
# StatefulSet `<name>-<group>` per group, whose pods `<name>-<group>-<index>` carry `<name>-<group>-<hash>`.
MAX_DERIVED_NAME_LENGTH: Final = 63
REVISION_HASH_SUFFIX_LENGTH: Final = 11
# Group indices a multi-host name is sized for at least: groups 0 to 999.
MIN_GROUP_INDEX_DIGITS: Final = 3

T = TypeVar("T")


def lb_service_name(name: str) -> str:
    """The core Service in front of the engines of the inference Service (or Playground) called `name`."""
    return name + LB_SERVICE_SUFFIX


def max_name_length(multi_host: bool = False, replicas: int = 1, min_group_digits: int = MIN_GROUP_INDEX_DIGITS) -> int:
    """The longest name of an inference Service (or Playground) whose derived names all fit (see above).

    A single-host one is bounded by the leader pods' revision label; a multi-host one by its workers', which also
    carry the group index: sized for `replicas` groups, and for at least `min_group_digits` digits of it (1000
    groups by default; 1 counts the current replicas alone).
    """
    longest = REVISION_HASH_SUFFIX_LENGTH
    if multi_host:
        digits = max(min_group_digits, len(str(max(replicas - 1, 0))))
        longest += 1 + digits
    return MAX_DERIVED_NAME_LENGTH - max(longest, len(LB_SERVICE_SUFFIX))


def is_main(role: str | None) -> bool:
    """Whether a claim's role makes it a main model: `main`, or none (the CRD's default)."""
    return role in (None, c.MAIN_ROLE)


def main_first(claims: Iterable[T], role: Callable[[T], str | None]) -> list[T]:
    """`claims` in llmaz's order (see the module docstring); `role(claim)` reads a claim's role."""
    ordered: list[T] = []
    for claim in claims:
        if is_main(role(claim)):
            ordered.insert(0, claim)
        else:
            ordered.append(claim)
    return ordered


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _role(claim: Mapping[str, Any]) -> str | None:
    role = claim.get("role")
    return role if isinstance(role, str) else None


def main_model(obj: Mapping[str, Any]) -> str | None:
    """The main model of a Playground or inference Service as stored (a plain dict), or None when it claims none."""
    spec = _mapping(obj.get("spec"))
    claimed = _mapping(spec.get("modelClaim")).get("modelName")
    if isinstance(claimed, str) and claimed:
        return claimed
    models = _mapping(spec.get("modelClaims")).get("models")
    claims = [m for m in models if isinstance(m, Mapping)] if isinstance(models, list) else []
    ordered = main_first(claims, _role)
    name = ordered[0].get("name") if ordered else None
    return name if isinstance(name, str) and name else None


# Tenancy (docs/tenancy.md): namespaces are tenants, and a model name is routed to one of them.


def serves_across_namespaces(open_model: Mapping[str, Any] | None) -> bool:
    """Whether a model's OpenModel (None: there is none) opts in to pooling every namespace that serves it: the
    annotation `llmaz.io/serve-across-namespaces` is exactly "true". OpenModels are cluster-scoped, so only who
    may write cluster-scoped objects (a cluster administrator) can set it."""
    annotations = _mapping(_mapping((open_model or {}).get("metadata")).get("annotations"))
    return annotations.get(c.SERVE_ACROSS_NAMESPACES_ANNOTATION) == "true"


_NEVER = datetime.max.replace(tzinfo=UTC)


def _claim_order(obj: Mapping[str, Any]) -> tuple[datetime, str]:
    meta = _mapping(obj.get("metadata"))
    created = parse_timestamp(meta.get("creationTimestamp"))
    return (created if created is not None else _NEVER), str(meta.get("namespace") or "")


def owning_namespace(claimants: Iterable[Mapping[str, Any]]) -> str | None:
    """The namespace that owns a model name, among the Playgrounds and inference Services whose main model it is
    (stored objects, plain dicts): the namespace of the one created first (the oldest `creationTimestamp`; an
    object without one counts as the newest), ties going to the namespace first by name. None without claimants.

    Every claimant of the owning namespace is routed, however young. When the oldest claimant goes, the name
    passes to the namespace of the oldest one left (which may be another namespace)."""
    namespaced = [obj for obj in claimants if _mapping(obj.get("metadata")).get("namespace")]
    return _claim_order(min(namespaced, key=_claim_order))[1] if namespaced else None


def routed_namespaces(claimants: Iterable[Mapping[str, Any]], open_model: Mapping[str, Any] | None) -> set[str]:
    """The namespaces whose claimants of one model llmaz-gateway routes to: the owning namespace alone, or every
    claimant's with the OpenModel's opt-in (`serves_across_namespaces`)."""
    listed = list(claimants)
    if serves_across_namespaces(open_model):
        return {str(_mapping(obj.get("metadata")).get("namespace") or "") for obj in listed} - {""}
    owner = owning_namespace(listed)
    return {owner} if owner is not None else set()


def model_name_taken(
    namespace: str, claimants: Iterable[Mapping[str, Any]], open_model: Mapping[str, Any] | None
) -> bool:
    """Whether a claimant in `namespace` gets no request for its model because another namespace owns the name
    (`claimants`: every claimant of the model, its own included)."""
    return namespace not in routed_namespaces(claimants, open_model)

"""What a Playground or an inference Service serves, as the controllers build it and the gateway routes it.

- The main model: the claims in llmaz's order (`main_first`: each claim whose role is unset or `main` is put
  first, any other is appended, so the last main claim leads and a draft follows it), and the main model is the
  first of that order. A Playground's `spec.modelClaim` is one main model and wins over `spec.modelClaims`.
- The engines of an inference Service (a Playground's is named after it) are behind the core Service
  `<name>-lb`, which the Service controller makes and the gateway routes to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from llmaz.apis import constants as c

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

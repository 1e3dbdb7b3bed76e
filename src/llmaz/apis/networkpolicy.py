"""The NetworkPolicy a Playground or an inference Service asks for: its opt-in annotation, as admission checks it
and the Service controller reads it.

`llmaz.io/network-policy: gateway-only` asks that the model's engines accept connections only from llmaz-gateway's
pods and from pods of the model's own namespace (a NetworkPolicy named like the Service, `builders.networkpolicy`);
`none`, or no annotation, for no policy. A Playground's annotation is copied to its inference Service, which owns
the policy. Admission refuses other values; a value stored without admission is read the safe way for the
cluster's traffic: anything but "gateway-only" asks for no policy (a policy llmaz cannot explain would cut traffic
nobody asked to cut).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from llmaz.apis import constants as c

GATEWAY_ONLY: Final = "gateway-only"
NONE: Final = "none"
NETWORK_POLICY_RULE: Final = (
    'must be "gateway-only" (a NetworkPolicy lets only llmaz-gateway and pods of this namespace reach the engines) '
    'or "none" (no policy, the default): set one of them or remove the annotation'
)


def parse_network_policy(text: str) -> str:
    """ "gateway-only" or "none"; ValueError for anything else."""
    if text not in (GATEWAY_ONLY, NONE):
        raise ValueError(NETWORK_POLICY_RULE)
    return text


def wants_gateway_only(annotations: Mapping[str, Any] | None) -> bool:
    """Whether an object with `annotations` asks for the gateway-only NetworkPolicy: its annotation is exactly
    "gateway-only"."""
    return (annotations or {}).get(c.NETWORK_POLICY_ANNOTATION) == GATEWAY_ONLY

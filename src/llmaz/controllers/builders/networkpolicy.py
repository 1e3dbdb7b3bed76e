"""The NetworkPolicy of an inference Service that asks for one (`llmaz.apis.networkpolicy`, `gateway-only`).

The policy is named like the Service, in its namespace, controlled by it and labelled as managed by llmaz like
every child. It selects every pod of the Service's LeaderWorkerSet (`leaderworkerset.sigs.k8s.io/name`: the
leaders the `-lb` Service sends requests to, and a multi-host group's workers, whose engines would otherwise stay
open) and admits ingress only from:

- llmaz-gateway's pods (`app.kubernetes.io/component: gateway` in the gateway's namespace), on the engine port
  (8080, where the engines serve requests and the metrics the gateway reads);
- every pod of the Service's own namespace, on any port: the namespace's own clients, and a multi-host group's
  leader and workers reaching each other (llama.cpp's RPC, SGLang's and vLLM's distributed ports).

Egress is not restricted. NetworkPolicies add up: to let Prometheus (or anything else) scrape the engines, a user
creates a policy of their own selecting the same pods; llmaz never touches it.
"""

from __future__ import annotations

from typing import Any

from llmaz.apis import Service
from llmaz.apis import constants as c
from llmaz.controllers.builders.meta import apply_ready, owned_metadata

NETWORK_POLICY_API_VERSION = "networking.k8s.io/v1"
# Every namespace carries this label with its own name (Kubernetes 1.22+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def build_network_policy(service: Service, gateway_namespace: str) -> dict[str, Any]:
    """The desired gateway-only NetworkPolicy of `service` (whether it asks for one is the caller's to check),
    admitting llmaz-gateway's pods of `gateway_namespace`."""
    name = service.metadata.name or ""
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: gateway_namespace}},
        "podSelector": {"matchLabels": {c.GATEWAY_COMPONENT_LABEL: c.GATEWAY_COMPONENT}},
    }
    policy = {
        "apiVersion": NETWORK_POLICY_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": owned_metadata(name, service.metadata, c.INFERENCE_API_VERSION, Service.KIND),
        "spec": {
            "podSelector": {"matchLabels": {c.LWS_NAME_LABEL: name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [gateway], "ports": [{"protocol": "TCP", "port": c.DEFAULT_BACKEND_PORT}]},
                # An empty podSelector without a namespaceSelector: every pod of the policy's own namespace.
                {"from": [{"podSelector": {}}]},
            ],
        },
    }
    result: dict[str, Any] = apply_ready(policy)
    return result

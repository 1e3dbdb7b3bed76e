"""Mutating/ValidatingWebhookConfiguration manifests rendered from registered webhooks.

The same `Webhook` values serve requests and describe themselves here, so the manifests cannot drift from
the server. Every entry: `admissionReviewVersions: [v1]`, the webhook's failure policy and side effects, and a
clientConfig pointing either at a Service (deployment) or at a URL (tests, local runs); `ca_bundle` is the
PEM CA that signed the serving certificate, when known.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmaz.runtime.webhook.handler import Webhook, WebhookType

KINDS = {
    WebhookType.MUTATING: "MutatingWebhookConfiguration",
    WebhookType.VALIDATING: "ValidatingWebhookConfiguration",
}


@dataclass(frozen=True, slots=True)
class ServiceRef:
    name: str
    namespace: str
    port: int | None = None


def configuration(
    kind: WebhookType,
    name: str,
    webhooks: Iterable[Webhook],
    *,
    service: ServiceRef | None = None,
    url: str | None = None,
    ca_bundle: bytes | None = None,
) -> dict[str, Any]:
    """The configuration object `name` holding every webhook of type `kind`, ordered by webhook name."""
    if (service is None) == (url is None):
        raise ValueError("exactly one of service and url is required")
    entries = [_entry(w, service, url, ca_bundle) for w in sorted(webhooks, key=lambda w: w.name) if w.type is kind]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": KINDS[kind],
        "metadata": {"name": name},
        "webhooks": entries,
    }


def _entry(webhook: Webhook, service: ServiceRef | None, url: str | None, ca_bundle: bytes | None) -> dict[str, Any]:
    client: dict[str, Any]
    if service is not None:
        client = {"service": {"name": service.name, "namespace": service.namespace, "path": webhook.path}}
        if service.port is not None:
            client["service"]["port"] = service.port
    else:
        client = {"url": f"{str(url).rstrip('/')}{webhook.path}"}
    if ca_bundle:
        client["caBundle"] = base64.b64encode(ca_bundle).decode()
    return {
        "name": webhook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "failurePolicy": webhook.failure_policy,
        "sideEffects": webhook.side_effects,
        "rules": [
            {
                "apiGroups": list(rule.api_groups),
                "apiVersions": list(rule.api_versions),
                "operations": list(rule.operations),
                "resources": list(rule.resources),
            }
            for rule in webhook.rules
        ],
    }

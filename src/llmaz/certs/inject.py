"""caBundle injection into every webhook of the named Mutating/ValidatingWebhookConfigurations.

Invariants: a write happens only when some webhook's caBundle differs from the wanted bundle, always with the
resourceVersion just read (a concurrent writer causes Conflict, and the read-modify-write is retried); the
bundle starts with the current CA and keeps other CAs found in the configurations while they are unexpired,
so a certificate signed by a previous CA stays trusted while replicas switch over.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from cryptography import x509

from llmaz.certs.pki import split_pem_bundle
from llmaz.runtime.client import Client, retry_on_conflict
from llmaz.runtime.resource import Resource

MUTATING = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                    "MutatingWebhookConfiguration", namespaced=False)  # fmt: skip
VALIDATING = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                      "ValidatingWebhookConfiguration", namespaced=False)  # fmt: skip


def bundle_of(configuration: dict[str, Any]) -> list[bytes]:
    """Every certificate in the caBundles of a configuration (each PEM-encoded, duplicates removed)."""
    found: dict[bytes, None] = {}
    for webhook in configuration.get("webhooks") or []:
        encoded = (webhook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            pem = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        found |= dict.fromkeys(split_pem_bundle(pem))
    return list(found)


def wanted_bundle(current_ca: bytes, present: Iterable[bytes], now: datetime) -> bytes:
    """The current CA, then the other unexpired CAs already present, newest expiry first."""
    head = split_pem_bundle(current_ca)
    others = [pem for pem in dict.fromkeys(present) if pem not in head]
    alive = [(x509.load_pem_x509_certificate(p).not_valid_after_utc, p) for p in others]
    kept = [p for expiry, p in sorted(alive, key=lambda item: item[0], reverse=True) if expiry > now]
    return b"".join(head + kept)


async def read_bundles(client: Client, targets: Iterable[tuple[Resource, str]]) -> list[bytes]:
    present: list[bytes] = []
    for resource, name in targets:
        present += bundle_of(await client.get(resource, name))
    return present


async def inject(client: Client, resource: Resource, name: str, bundle: bytes) -> bool:
    """Set `bundle` as caBundle of every webhook in configuration `name`; True if it had to be written."""
    encoded = base64.b64encode(bundle).decode()

    async def attempt() -> bool:
        config = await client.get(resource, name)
        hooks = config.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == encoded for h in hooks):
            return False
        for hook in hooks:
            hook.setdefault("clientConfig", {})["caBundle"] = encoded
        await client.update(resource, config)
        return True

    return await retry_on_conflict(attempt)

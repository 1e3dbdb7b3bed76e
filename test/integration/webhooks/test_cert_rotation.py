"""Short-lived self-managed certificates: the serving certificate and then the CA are renewed, the caBundle
follows, and not one admission fails during the switches."""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import timedelta
from pathlib import Path

from cryptography import x509

from llmaz.certs.inject import MUTATING, VALIDATING
from llmaz.certs.rotator import SECRETS
from llmaz.runtime.client import ApiError, Client
from llmaz.runtime.webhook import WebhookType

from .conftest import OPENMODELS, Webhooks, openmodel, serving


async def bundles(client: Client, hooks: Webhooks) -> set[str]:
    found = set()
    for kind, resource in ((WebhookType.MUTATING, MUTATING), (WebhookType.VALIDATING, VALIDATING)):
        config = await client.get(resource, hooks.configurations[kind])
        found |= {w["clientConfig"]["caBundle"] for w in config["webhooks"]}
    return found


def serial(hooks: Webhooks) -> int:
    pem = hooks.server.certs.certificate_pem
    assert pem is not None
    return x509.load_pem_x509_certificate(pem).serial_number


async def test_short_lived_certificates_rotate_without_a_failed_admission(
    client: Client, namespace: str, tmp_path: Path
) -> None:
    short = {
        "ca_validity": timedelta(seconds=40),
        "cert_validity": timedelta(seconds=16),
        "lookahead": timedelta(seconds=10),
        "check_interval": 2.0,
        "propagation_delay": 2.0,
    }
    async with serving(client, namespace, tmp_path / "certs", None, **short) as hooks:
        first_ca = (await client.get(SECRETS, "llmaz-webhook-server-cert", namespace))["data"]["ca.crt"]
        first_bundles = await bundles(client, hooks)
        assert len(first_bundles) == 1  # every webhook of both configurations has the same bundle
        serials, failures, admitted = {serial(hooks)}, [], 0
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                created = await client.create(OPENMODELS, openmodel("rotating"), dry_run=True)
                assert created["metadata"]["labels"]["llmaz.io/model-family-name"] == "qwen2"
                admitted += 1
            except ApiError as exc:
                failures.append(exc.message)
            serials.add(serial(hooks))
            await asyncio.sleep(0.05)
        # The two configurations are written one after the other: let an injection in flight finish.
        for _ in range(100):
            last_bundles = await bundles(client, hooks)
            if len(last_bundles) == 1:
                break
            await asyncio.sleep(0.1)
        secret = await client.get(SECRETS, "llmaz-webhook-server-cert", namespace)

    assert failures == []
    assert admitted > 100
    assert len(serials) >= 3  # re-signed by the first CA, then signed by a new one
    assert secret["data"]["ca.crt"] != first_ca
    assert last_bundles != first_bundles
    [bundle] = last_bundles
    assert base64.b64decode(bundle).startswith(base64.b64decode(secret["data"]["ca.crt"]))

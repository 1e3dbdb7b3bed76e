"""Short-lived self-managed certificates: the serving certificate and then the CA are renewed, the caBundle
follows, and not one admission fails during the switches."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

from cryptography import x509

from llmaz.certs.inject import MUTATING, VALIDATING
from llmaz.certs.rotator import SECRETS
from llmaz.runtime.client import ApiError, Client
from llmaz.runtime.webhook import WebhookType
from llmaz_dev.testing.waiting import eventually

from .conftest import OPENMODELS, Webhooks, openmodel, serving


async def bundles(client: Client, hooks: Webhooks) -> set[str]:
    found = set()
    for kind, resource in ((WebhookType.MUTATING, MUTATING), (WebhookType.VALIDATING, VALIDATING)):
        config = await client.get(resource, hooks.configurations[kind])
        found |= {w["clientConfig"]["caBundle"] for w in config["webhooks"]}
    return found


async def bundles_if_one(client: Client, hooks: Webhooks) -> set[str] | None:
    found = await bundles(client, hooks)
    return found if len(found) == 1 else None


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
        serials, failures, families = {serial(hooks)}, list[str](), list[str]()
        before_new_ca: set[int] = set()  # the serials served before the CA was renewed
        under_new_ca = 0  # admissions through a certificate signed by the renewed CA

        async def admitted_well_past_a_ca_renewal() -> bool:
            nonlocal under_new_ca
            try:
                created = await client.create(OPENMODELS, openmodel("rotating"), dry_run=True)
                families.append(created["metadata"]["labels"]["llmaz.io/model-family-name"])
            except ApiError as exc:
                failures.append(exc.message)
            serials.add(current := serial(hooks))
            if not before_new_ca:
                secret = await client.get(SECRETS, "llmaz-webhook-server-cert", namespace)
                if secret["data"]["ca.crt"] != first_ca:  # the Secret is written before the files are
                    before_new_ca.update(serials)
            elif current not in before_new_ca:
                under_new_ca += 1
            return under_new_ca >= 50

        await eventually(admitted_well_past_a_ca_renewal, within=90, what="50 admissions past a CA renewal")
        # The two configurations are written one after the other: let an injection in flight finish.
        last_bundles = await eventually(
            lambda: bundles_if_one(client, hooks), within=10, what="one caBundle in both configurations"
        )
        secret = await client.get(SECRETS, "llmaz-webhook-server-cert", namespace)

    assert failures == []
    assert len(families) > 100
    assert set(families) == {"qwen2"}
    assert len(serials) >= 3  # re-signed by the first CA, then signed by a new one
    assert secret["data"]["ca.crt"] != first_ca
    assert last_bundles != first_bundles
    [bundle] = last_bundles
    assert base64.b64decode(bundle).startswith(base64.b64decode(secret["data"]["ca.crt"]))

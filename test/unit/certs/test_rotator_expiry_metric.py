"""The certificate rotator exports when its certificates expire
(`llmaz_webhook_certificate_expiration_timestamp_seconds`, read by the certificate alerts of
config/prometheus/alerts.yaml), and follows a renewal. The API server is an in-memory fake of the few calls the
rotator makes: the Secret and the two webhook configurations."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from llmaz.certs import CertRotator, RotatorOptions
from llmaz.certs.material import from_secret
from llmaz.certs.rotator import SECRETS
from llmaz.runtime.client import Client, NotFound
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.resource import Resource

METRIC = "llmaz_webhook_certificate_expiration_timestamp_seconds"


class FakeApi:
    """Objects by (resource, name); the webhook configurations exist from the start, each with one webhook."""

    def __init__(self, options: RotatorOptions) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {
            (resource.plural, name): {"metadata": {"name": name}, "webhooks": [{"name": "w", "clientConfig": {}}]}
            for resource, name in options.targets
        }

    async def get(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        try:
            return copy.deepcopy(self.objects[(resource.plural, name)])
        except KeyError:
            raise NotFound(404, "NotFound", f"{resource.plural} {name} not found") from None

    async def create(self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **_: Any) -> Any:
        self.objects[(resource.plural, obj["metadata"]["name"])] = copy.deepcopy(obj)
        return obj

    async def update(self, resource: Resource, obj: dict[str, Any], **_: Any) -> Any:
        self.objects[(resource.plural, obj["metadata"]["name"])] = copy.deepcopy(obj)
        return obj


def expiry(certificate: str) -> float | None:
    return REGISTRY.get_sample_value(METRIC, {"certificate": certificate})


async def test_each_pass_exports_the_serving_certificates_and_the_cas_expiry_and_a_renewal_moves_it(
    tmp_path: Path,
) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    options = RotatorOptions(namespace="llmaz-system", cert_dir=tmp_path, propagation_delay=0)
    api = FakeApi(options)
    rotator = CertRotator(cast(Client, api), options, now=lambda: now)
    await rotator.sync()
    material = from_secret(api.objects[(SECRETS.plural, options.secret_name)])
    assert material is not None
    assert expiry("serving") == material.serving.not_after.timestamp()
    assert expiry("ca") == material.ca.not_after.timestamp()
    assert expiry("serving") == (now + options.cert_validity).timestamp()

    now += options.cert_validity - options.lookahead + timedelta(days=1)  # inside the renewal window
    await rotator.sync()
    assert expiry("serving") == (now + options.cert_validity).timestamp()
    assert expiry("ca") == material.ca.not_after.timestamp()  # the CA is still good: kept

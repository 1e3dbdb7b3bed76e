"""Self-managed webhook certificates: a CA and a serving certificate kept in a Secret, served from files,
trusted through the caBundle of both webhook configurations, renewed before they expire.

Every replica runs a `CertRotator` (no leader election). One pass (`sync`):
1. Read the Secret. If its material is not usable (missing, broken, for another name, or expiring within the
   lookahead) renew it: re-sign with the current CA while that CA is good, else make a new CA.
2. A new CA is added to the caBundles *before* the Secret holds it, and, if some other CA was trusted until
   now, `propagation_delay` passes before anything serves a certificate it signed, so the API server trusts
   the new CA by the time it sees it. The previous CA stays in the bundle until it expires.
3. Write the Secret with the resourceVersion read in step 1 (create if absent). Losing a race to another
   replica (Conflict / AlreadyExists) restarts the pass from a fresh read, and the winner's material is used.
4. Write `tls.crt`/`tls.key`/`ca.crt` into `cert_dir` atomically (when changed) for the webhook server, and
   make every webhook's caBundle the wanted bundle.
`ready()` turns true after the first complete pass: certificate files in place and the CA injected. Passes
repeat every `check_interval` (default 60 s, which also repairs a caBundle wiped by re-applied manifests) or
sooner when a certificate reaches its renewal point; failed passes retry with backoff (1 s doubling up to
the interval) and never end the runnable, so the pod simply stays unready. Every pass that reads usable material
sets `llmaz_webhook_certificate_expiration_timestamp_seconds`, the notAfter of the serving certificate and the CA.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import Gauge

from llmaz.certs.files import write_files
from llmaz.certs.inject import MUTATING, VALIDATING, inject, read_bundles, wanted_bundle
from llmaz.certs.material import CA_CERT, TLS_CERT, TLS_KEY, Material, Policy, from_secret, renew, usable
from llmaz.certs.pki import split_pem_bundle
from llmaz.runtime.client import AlreadyExists, Client, Conflict, NotFound
from llmaz.runtime.log import get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource

SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
DEFAULT_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
SECRET_NAME = "llmaz-webhook-server-cert"
MUTATING_CONFIGURATION = "llmaz-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "llmaz-validating-webhook-configuration"
# Only the objects of the default options (the names the manifests use), and the Secret only in the manager's
# namespace; `create` cannot be limited by name, so it is granted there for a deleted Secret to come back.
RBAC_RULES = (
    allow(SECRETS, "get", "update", names=(SECRET_NAME,), own_namespace=True),
    allow(SECRETS, "create", own_namespace=True),
    allow(MUTATING, "get", "update", names=(MUTATING_CONFIGURATION,)),
    allow(VALIDATING, "get", "update", names=(VALIDATING_CONFIGURATION,)),
)
_RACE_RETRIES = 5
EXPIRATION = Gauge(
    "llmaz_webhook_certificate_expiration_timestamp_seconds",
    "When the self-managed webhook certificates expire, in Unix time: `certificate` is `serving` (the one the "
    "webhook server presents) or `ca` (the one the webhook configurations trust). Each is renewed 90 days before.",
    ["certificate"],
    registry=REGISTRY,
)


@dataclass(frozen=True, slots=True)
class RotatorOptions:
    namespace: str
    secret_name: str = SECRET_NAME
    service_name: str = "llmaz-webhook-service"
    cert_dir: Path = DEFAULT_CERT_DIR
    mutating_configurations: tuple[str, ...] = (MUTATING_CONFIGURATION,)
    validating_configurations: tuple[str, ...] = (VALIDATING_CONFIGURATION,)
    extra_dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    ca_validity: timedelta = timedelta(days=3650)
    cert_validity: timedelta = timedelta(days=365)
    lookahead: timedelta = timedelta(days=90)
    """Renew a certificate this long before it expires. Default 90 days."""
    check_interval: float = 60.0
    """Seconds between passes. Default 60."""
    propagation_delay: float = 5.0
    """Seconds between trusting a new CA and serving a certificate it signed. Default 5."""
    targets: tuple[tuple[Resource, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        targets = [(MUTATING, n) for n in self.mutating_configurations]
        targets += [(VALIDATING, n) for n in self.validating_configurations]
        object.__setattr__(self, "targets", tuple(targets))

    @property
    def dns_name(self) -> str:
        return f"{self.service_name}.{self.namespace}.svc"

    def policy(self) -> Policy:
        return Policy(
            dns_names=(self.dns_name, *self.extra_dns_names),
            ip_addresses=self.ip_addresses,
            ca_validity=self.ca_validity,
            cert_validity=self.cert_validity,
            lookahead=self.lookahead,
        )


class CertRotator:
    needs_leader_election = False

    def __init__(
        self,
        client: Client,
        options: RotatorOptions,
        *,
        on_files_written: Callable[[], Any] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.options = options
        self.on_files_written = on_files_written
        self._now = now
        self._policy = options.policy()
        self._ready = asyncio.Event()
        self._material: Material | None = None
        self._log = get_logger("llmaz.certs").bind(secret=f"{options.namespace}/{options.secret_name}")

    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def run(self) -> None:
        backoff = 1.0
        while True:
            try:
                await self.sync()
            except Exception as exc:
                self._log.error("certificate sync failed", error=repr(exc), retry_in=backoff)
                wait, backoff = backoff, min(backoff * 2, self.options.check_interval)
            else:
                wait, backoff = self._next_check(), 1.0
            await asyncio.sleep(wait)

    def _next_check(self) -> float:
        """The check interval, or less if a certificate reaches its renewal point before then."""
        if self._material is None:
            return self.options.check_interval
        expiry = min(self._material.ca.not_after, self._material.serving.not_after)
        due = (expiry - self._policy.lookahead - self._now()).total_seconds() + 0.5
        return max(0.1, min(self.options.check_interval, due))

    async def sync(self) -> None:
        """One pass; a lost write race restarts it from a fresh read (bounded)."""
        for attempt in range(_RACE_RETRIES):
            try:
                await self._sync_once()
                return
            except (Conflict, AlreadyExists):
                if attempt == _RACE_RETRIES - 1:
                    raise
                self._log.info("lost a certificate write race; re-reading")

    async def _sync_once(self) -> None:
        now = self._now()
        secret = await self._read_secret()
        current = from_secret(secret)
        material = current if current is not None and usable(current, self._policy, now) else None
        if material is None:
            material = await self._renew(secret, current, now)
        self._material = material
        EXPIRATION.labels("serving").set(material.serving.not_after.timestamp())
        EXPIRATION.labels("ca").set(material.ca.not_after.timestamp())
        self._write_files(material)
        present = await read_bundles(self.client, self.options.targets)
        bundle = wanted_bundle(material.ca.cert_pem, present, now)
        for resource, name in self.options.targets:
            if await inject(self.client, resource, name, bundle):
                self._log.info("caBundle injected", configuration=name)
        self._ready.set()

    async def _read_secret(self) -> dict[str, Any] | None:
        try:
            return await self.client.get(SECRETS, self.options.secret_name, self.options.namespace)
        except NotFound:
            return None

    async def _renew(self, secret: dict[str, Any] | None, current: Material | None, now: datetime) -> Material:
        renewed = renew(current, self._policy, now)
        if current is None or renewed.ca != current.ca:
            present = await read_bundles(self.client, self.options.targets)
            previous = split_pem_bundle(current.ca.cert_pem) if current else []
            bundle = wanted_bundle(renewed.ca.cert_pem, [*present, *previous], now)
            for resource, name in self.options.targets:
                await inject(self.client, resource, name, bundle)
            if [p for p in present if p != renewed.ca.cert_pem]:
                await asyncio.sleep(self.options.propagation_delay)
        await self._store(secret, renewed)
        self._log.info("certificates renewed", new_ca=current is None or renewed.ca != current.ca,
                       not_after=renewed.serving.not_after.isoformat())  # fmt: skip
        return renewed

    async def _store(self, secret: dict[str, Any] | None, material: Material) -> None:
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.options.secret_name, "namespace": self.options.namespace},
                "data": material.to_secret_data(),
            }
            await self.client.create(SECRETS, body)
            return
        secret["data"] = {**(secret.get("data") or {}), **material.to_secret_data()}
        await self.client.update(SECRETS, secret)  # carries the resourceVersion read: Conflict on a race

    def _write_files(self, material: Material) -> None:
        files = {TLS_KEY: material.serving.key_pem, TLS_CERT: material.serving.cert_pem, CA_CERT: material.ca.cert_pem}
        if write_files(self.options.cert_dir, files) and self.on_files_written is not None:
            self.on_files_written()

"""The certificate material held in the Secret (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`), and when to renew it.

Invariants: material is "usable" only if the CA and the serving certificate parse, the serving certificate is
signed by that CA, matches its key and names the service DNS name; it needs renewal when either certificate
expires within the lookahead. A CA that is itself still good beyond the lookahead is kept and only the serving
certificate is re-signed, so the caBundle does not change.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from llmaz.certs.pki import KeyPair, covers, key_matches, new_ca, new_serving_cert, signed_by, valid_until

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


@dataclass(frozen=True, slots=True)
class Material:
    ca: KeyPair
    serving: KeyPair

    def to_secret_data(self) -> dict[str, str]:
        raw = {
            CA_CERT: self.ca.cert_pem,
            CA_KEY: self.ca.key_pem,
            TLS_CERT: self.serving.cert_pem,
            TLS_KEY: self.serving.key_pem,
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}


def from_secret(secret: dict[str, Any] | None) -> Material | None:
    """The material of a Secret, or None if any of the four keys is missing or not base64."""
    data = (secret or {}).get("data") or {}
    try:
        raw = {k: base64.b64decode(data[k], validate=True) for k in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)}
    except (KeyError, TypeError, binascii.Error):
        return None
    return Material(KeyPair(raw[CA_CERT], raw[CA_KEY]), KeyPair(raw[TLS_CERT], raw[TLS_KEY]))


@dataclass(frozen=True, slots=True)
class Policy:
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    ca_name: str = "llmaz-ca"
    ca_organization: str = "llmaz"
    ca_validity: timedelta = timedelta(days=3650)
    cert_validity: timedelta = timedelta(days=365)
    lookahead: timedelta = timedelta(days=90)


def ca_usable(material: Material | None, policy: Policy, now: datetime) -> bool:
    if material is None:
        return False
    ca = material.ca
    return valid_until(ca.cert_pem, now, policy.lookahead) and key_matches(ca.cert_pem, ca.key_pem)


def usable(material: Material | None, policy: Policy, now: datetime) -> bool:
    if material is None or not ca_usable(material, policy, now):
        return False
    serving = material.serving
    return (
        valid_until(serving.cert_pem, now, policy.lookahead)
        and key_matches(serving.cert_pem, serving.key_pem)
        and signed_by(serving.cert_pem, material.ca.cert_pem)
        and all(covers(serving.cert_pem, name) for name in policy.dns_names)
    )


def renew(current: Material | None, policy: Policy, now: datetime) -> Material:
    """New material: the current CA re-used when still usable, else a new CA; always a new serving cert."""
    ca = current.ca if current is not None and ca_usable(current, policy, now) else None
    if ca is None:
        ca = new_ca(now, policy.ca_name, policy.ca_organization, policy.ca_validity)
    serving = new_serving_cert(ca, now, policy.dns_names, policy.ip_addresses, policy.cert_validity)
    return Material(ca, serving)

"""Certificates and keys for a loopback control plane, made with `llmaz.certs.pki`.

Invariants:
- One self-signed CA signs both the kube-apiserver serving certificate (SANs 127.0.0.1, ::1, localhost and
  the in-cluster `kubernetes.default.svc` names) and the admin client certificate (O=system:masters, so RBAC
  grants it everything).
- The service-account key pair is separate from the CA: kube-apiserver signs ServiceAccount tokens with it
  (TokenRequest API) and verifies them with its public half.
- The CA's key is kept (0600) so that the node tier can sign its kubelet's client certificate.
- Keys are EC P-256 (fast to generate); files are written 0600 into the directory given and never reused
  across control planes.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from llmaz.certs import pki

_VALIDITY = datetime.timedelta(days=365)
_SERVING_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
_SERVING_IPS = ("127.0.0.1", "::1")
ADMIN_USER = "llmaz-envtest-admin"


@dataclass(frozen=True)
class ControlPlanePKI:
    """File paths of everything `write_pki` generates."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_public_key: Path


def write_pki(directory: Path, extra_ips: Sequence[str] = ()) -> ControlPlanePKI:
    """Generate a fresh CA, serving and admin certificates and a service-account key pair in `directory`.

    `extra_ips` are added to the serving certificate's SANs (a non-loopback address the API server listens on,
    and the `kubernetes` Service's ClusterIP).
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = ControlPlanePKI(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
    )
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.new_ca(now, "llmaz-envtest-ca", validity=_VALIDITY, new_key=pki.ec_key)
    _write(paths.ca_cert, ca.cert_pem)
    _write(paths.ca_key, ca.key_pem)

    ips = [*_SERVING_IPS, *(ip for ip in extra_ips if ip not in _SERVING_IPS)]
    serving = pki.new_serving_cert(ca, now, _SERVING_DNS_NAMES, ips, _VALIDITY, new_key=pki.ec_key)
    _write(paths.serving_cert, serving.cert_pem)
    _write(paths.serving_key, serving.key_pem)

    admin = pki.new_client_cert(ca, now, ADMIN_USER, "system:masters", _VALIDITY, new_key=pki.ec_key)
    _write(paths.admin_cert, admin.cert_pem)
    _write(paths.admin_key, admin.key_pem)

    sa_key = pki.ec_key()
    private_pem = sa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(paths.service_account_key, private_pem)
    public_pem = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write(paths.service_account_public_key, public_pem)
    return paths


def write_key_pair(pair: pki.KeyPair, cert: Path, key: Path) -> None:
    """A certificate and its key into two files, the key readable by its owner only."""
    _write(cert, pair.cert_pem)
    _write(key, pair.key_pem)


def _write(path: Path, content: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(content)

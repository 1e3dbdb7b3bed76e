"""Certificates and keys for a loopback control plane.

Invariants:
- One self-signed CA signs both the kube-apiserver serving certificate (SANs 127.0.0.1, ::1, localhost and
  the in-cluster `kubernetes.default.svc` names) and the admin client certificate (O=system:masters, so RBAC
  grants it everything).
- The service-account key pair is separate from the CA: kube-apiserver signs ServiceAccount tokens with it
  (TokenRequest API) and verifies them with its public half.
- Keys are EC P-256 (fast to generate); files are written 0600 into the directory given and never reused
  across control planes.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)
_SERVING_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
_SERVING_IPS = ("127.0.0.1", "::1")
_SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
_CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH


@dataclass(frozen=True)
class ControlPlanePKI:
    """File paths of everything `write_pki` generates."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_public_key: Path


def write_pki(directory: Path) -> ControlPlanePKI:
    """Generate a fresh CA, serving and admin certificates and a service-account key pair in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = ControlPlanePKI(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("llmaz-envtest-ca")
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, is_ca=True)
    _write(pki.ca_cert, ca.public_bytes(serialization.Encoding.PEM))

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in _SERVING_DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _SERVING_IPS]
    serving = _certificate(
        _name("kube-apiserver"), ca_name, serving_key.public_key(), ca_key, sans=sans, usage=_SERVER_AUTH
    )
    _write_pair(pki.serving_cert, pki.serving_key, serving, serving_key)

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin_name = _name("llmaz-envtest-admin", organization="system:masters")
    admin = _certificate(admin_name, ca_name, admin_key.public_key(), ca_key, usage=_CLIENT_AUTH)
    _write_pair(pki.admin_cert, pki.admin_key, admin, admin_key)

    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write(pki.service_account_key, _private_pem(sa_key))
    public_pem = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write(pki.service_account_public_key, public_pem)
    return pki


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    *,
    is_ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    # Backdated a little so that a clock step right after generation does not make it "not yet valid".
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    builder = builder.add_extension(_key_usage(cert_sign=is_ca), critical=True)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_pair(cert_path: Path, key_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _write(key_path, _private_pem(key))


def _write(path: Path, content: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(content)

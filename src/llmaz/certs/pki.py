"""A self-signed CA and the serving and client certificates it signs, as PEM bytes (cryptography).

Keys are RSA 2048 unless a caller passes another key factory (the local control plane uses EC P-256, which is
much faster to generate). Invariants: certificates are backdated by one hour (clock skew between us and the API
server); a leaf certificate never outlives its CA, so once the CA expires nothing it signed is still in use;
serving certificates carry ExtKeyUsage ServerAuth, CN = the first DNS name (cut to 64 characters), and every DNS
name and IP as SANs; client certificates carry ExtKeyUsage ClientAuth, and their CN and O are the user name and
group the API server reads from them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = timedelta(days=3650)
CERT_VALIDITY = timedelta(days=365)
BACKDATE = timedelta(hours=1)
RSA_BITS = 2048


PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
KeyFactory = Callable[[], PrivateKey]


def rsa_key() -> PrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)


def ec_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> datetime:
        return self.cert.not_valid_after_utc


def new_ca(
    now: datetime,
    common_name: str,
    organization: str | None = None,
    validity: timedelta = CA_VALIDITY,
    new_key: KeyFactory = rsa_key,
) -> KeyPair:
    key = new_key()
    name = _name(common_name, organization)
    usage = x509.KeyUsage(True, False, True, False, False, True, False, False, False)  # sign, encipher, cert sign
    cert = (
        _builder(name, name, key, now - BACKDATE, now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving_cert(
    ca: KeyPair,
    now: datetime,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    validity: timedelta = CERT_VALIDITY,
    new_key: KeyFactory = rsa_key,
) -> KeyPair:
    # X.509 caps the CN at 64 characters; clients verify the SANs, so a cut CN is harmless.
    common_name = (dns_names[0] if dns_names else "localhost")[:64]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return _leaf(ca, now, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, validity, new_key, sans)


def new_client_cert(
    ca: KeyPair,
    now: datetime,
    common_name: str,
    organization: str | None = None,
    validity: timedelta = CERT_VALIDITY,
    new_key: KeyFactory = rsa_key,
) -> KeyPair:
    """A client certificate: the API server authenticates it as user `common_name` in group `organization`."""
    return _leaf(ca, now, _name(common_name, organization), ExtendedKeyUsageOID.CLIENT_AUTH, validity, new_key)


def self_signed(now: datetime, dns_names: Sequence[str], ip_addresses: Sequence[str] = ()) -> KeyPair:
    """A serving certificate signed by a throwaway CA (for endpoints nobody pins, such as metrics)."""
    ca = new_ca(now, "llmaz-self-signed-ca", "llmaz")
    return new_serving_cert(ca, now, dns_names, ip_addresses)


def _leaf(
    ca: KeyPair,
    now: datetime,
    subject: x509.Name,
    extended_usage: x509.ObjectIdentifier,
    validity: timedelta,
    new_key: KeyFactory,
    sans: list[x509.GeneralName] | None = None,
) -> KeyPair:
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"the CA key is a {type(ca_key).__name__}, not an RSA or EC key")
    key = new_key()
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    usage = x509.KeyUsage(True, False, True, False, False, False, False, False, False)  # sign, key encipherment
    builder = (
        _builder(subject, ca_cert.subject, key, now - BACKDATE, not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([extended_usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: PrivateKey, not_before: datetime, not_after: datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def valid_until(pem: bytes, now: datetime, lookahead: timedelta) -> bool:
    """The PEM certificate parses and is valid from now until at least now + lookahead."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return False
    return cert.not_valid_before_utc <= now and now + lookahead < cert.not_valid_after_utc


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    try:
        x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def covers(cert_pem: bytes, dns_name: str) -> bool:
    """The certificate names `dns_name` among its DNS SANs."""
    try:
        sans = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, x509.ExtensionNotFound):
        return False
    return dns_name in sans.value.get_values_for_type(x509.DNSName)


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(serialization.Encoding.PEM, spki) == key.public_key().public_bytes(
        serialization.Encoding.PEM, spki
    )


def split_pem_bundle(bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each re-encoded; unparsable content is dropped."""
    try:
        certs = x509.load_pem_x509_certificates(bundle)
    except ValueError:
        return []
    return [c.public_bytes(serialization.Encoding.PEM) for c in certs]

"""Certificate material: usability rules, renewal keeps a good CA, bundles keep unexpired previous CAs."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmaz.certs.files import ensure_self_signed, write_files
from llmaz.certs.inject import bundle_of, wanted_bundle
from llmaz.certs.material import Material, Policy, from_secret, renew, usable
from llmaz.certs.pki import covers, ec_key, key_matches, new_ca, new_client_cert, new_serving_cert, signed_by

NOW = datetime(2030, 1, 1, tzinfo=UTC)
POLICY = Policy(dns_names=("llmaz-webhook-service.llmaz-system.svc",), ip_addresses=("127.0.0.1",))


def test_new_material_is_usable_and_round_trips_through_the_secret() -> None:
    material = renew(None, POLICY, NOW)
    assert usable(material, POLICY, NOW)
    assert covers(material.serving.cert_pem, "llmaz-webhook-service.llmaz-system.svc")
    assert signed_by(material.serving.cert_pem, material.ca.cert_pem)
    secret = {"data": material.to_secret_data()}
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert from_secret(secret) == material


def test_an_empty_or_broken_secret_has_no_material() -> None:
    assert from_secret({"data": {}}) is None
    assert from_secret(None) is None
    assert from_secret({"data": {"ca.crt": "!", "ca.key": "", "tls.crt": "", "tls.key": ""}}) is None


def test_material_expiring_within_the_lookahead_is_renewed_with_the_same_ca() -> None:
    material = renew(None, POLICY, NOW)
    later = NOW + timedelta(days=365 - 89)
    assert not usable(material, POLICY, later)
    renewed = renew(material, POLICY, later)
    assert renewed.ca == material.ca
    assert renewed.serving != material.serving
    assert usable(renewed, POLICY, later)


def test_a_ca_expiring_within_the_lookahead_is_replaced() -> None:
    short = Policy(POLICY.dns_names, ca_validity=timedelta(days=100), cert_validity=timedelta(days=365))
    material = renew(None, short, NOW)
    assert material.serving.not_after <= material.ca.not_after  # never outlives its CA
    later = NOW + timedelta(days=20)
    assert not usable(material, short, later)
    assert renew(material, short, later).ca != material.ca


def test_material_for_another_name_or_ca_is_not_usable() -> None:
    material = renew(None, POLICY, NOW)
    other = Policy(("other.svc",))
    assert not usable(material, other, NOW)
    foreign = Material(new_ca(NOW, "x", "y"), material.serving)
    assert not usable(foreign, POLICY, NOW)


def configuration(*bundles: bytes) -> dict[str, object]:
    return {"webhooks": [{"clientConfig": {"caBundle": base64.b64encode(b).decode()}} for b in bundles]}


def test_the_bundle_is_the_current_ca_then_other_unexpired_cas() -> None:
    current = new_ca(NOW, "current", "llmaz").cert_pem
    previous = new_ca(NOW - timedelta(days=1), "previous", "llmaz", timedelta(days=30)).cert_pem
    expired = new_ca(NOW - timedelta(days=10), "expired", "llmaz", timedelta(days=1)).cert_pem
    present = bundle_of(configuration(previous + expired, current, b"garbage"))
    assert wanted_bundle(current, present, NOW) == current + previous
    assert bundle_of({"webhooks": [{"clientConfig": {"caBundle": "%%%"}}, {}]}) == []


def test_files_are_written_only_when_they_change(tmp_path: Path) -> None:
    assert write_files(tmp_path / "d", {"tls.key": b"k", "tls.crt": b"c"})
    assert not write_files(tmp_path / "d", {"tls.key": b"k", "tls.crt": b"c"})
    assert (tmp_path / "d" / "tls.crt").read_bytes() == b"c"
    assert (tmp_path / "d" / "tls.key").stat().st_mode & 0o777 == 0o600


def test_a_self_signed_pair_is_created_once(tmp_path: Path) -> None:
    ensure_self_signed(tmp_path, ["localhost"], ["127.0.0.1"])
    first = (tmp_path / "tls.crt").read_bytes()
    ensure_self_signed(tmp_path, ["localhost"])
    assert (tmp_path / "tls.crt").read_bytes() == first
    assert covers(first, "localhost")


def test_a_serving_certificate_names_its_dns_names_and_ips() -> None:
    ca = new_ca(NOW, "ca", "llmaz")
    cert = new_serving_cert(ca, NOW, ["a.svc", "b.svc"], ["127.0.0.1"])
    assert covers(cert.cert_pem, "b.svc")
    assert cert.cert.not_valid_before_utc == NOW - timedelta(hours=1)


def test_a_client_certificate_names_its_user_and_group_and_is_for_client_auth_only() -> None:
    ca = new_ca(NOW, "ca", new_key=ec_key)
    client = new_client_cert(ca, NOW, "alice", "system:masters", new_key=ec_key)
    cert = x509.load_pem_x509_certificate(client.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert signed_by(client.cert_pem, ca.cert_pem)
    assert key_matches(client.cert_pem, client.key_pem)
    assert client.not_after <= ca.not_after


def test_a_leaf_never_outlives_its_ca() -> None:
    ca = new_ca(NOW, "ca", validity=timedelta(days=10))
    serving = new_serving_cert(ca, NOW, ["svc"], validity=timedelta(days=365))
    assert serving.not_after == ca.not_after

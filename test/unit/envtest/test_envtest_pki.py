"""The certificates llmaz_dev.envtest generates for a loopback control plane."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmaz_dev.envtest._pki import write_pki


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_serving_certificate_covers_loopback_and_in_cluster_names_and_is_signed_by_the_ca(
    tmp_path: Path,
) -> None:
    pki = write_pki(tmp_path)
    ca, serving = load(pki.ca_cert), load(pki.serving_cert)

    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "kubernetes.default.svc"} <= set(sans.get_values_for_type(x509.DNSName))
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert ExtendedKeyUsageOID.SERVER_AUTH in serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    serving.verify_directly_issued_by(ca)


def test_admin_client_certificate_is_in_system_masters(tmp_path: Path) -> None:
    pki = write_pki(tmp_path)
    admin = load(pki.admin_cert)

    organizations = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert organizations == ["system:masters"]
    assert ExtendedKeyUsageOID.CLIENT_AUTH in admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    admin.verify_directly_issued_by(load(pki.ca_cert))


def test_every_control_plane_gets_fresh_private_files(tmp_path: Path) -> None:
    first, second = write_pki(tmp_path / "a"), write_pki(tmp_path / "b")

    assert first.service_account_key.read_bytes() != second.service_account_key.read_bytes()
    for key in (first.serving_key, first.admin_key, first.service_account_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600

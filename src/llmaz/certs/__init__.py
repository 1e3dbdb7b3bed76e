"""Self-managed TLS for the webhook (and metrics) servers: a self-signed CA and serving certificates kept in
a Secret, written to the server's certificate directory, trusted through the webhook configurations'
caBundle and renewed before expiry. Not used when certificates are managed externally (`--cert-dir`).
"""

from llmaz.certs.files import ensure_self_signed, write_files
from llmaz.certs.pki import KeyPair, new_ca, new_serving_cert, self_signed
from llmaz.certs.rotator import DEFAULT_CERT_DIR, CertRotator, RotatorOptions

__all__ = [
    "DEFAULT_CERT_DIR",
    "CertRotator",
    "KeyPair",
    "RotatorOptions",
    "ensure_self_signed",
    "new_ca",
    "new_serving_cert",
    "self_signed",
    "write_files",
]

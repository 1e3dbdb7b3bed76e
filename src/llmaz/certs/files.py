"""Certificate files on disk: atomic, change-only writes, and a self-signed pair for endpoints nobody pins."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from llmaz.certs.pki import self_signed


def write_files(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Write each file (in the given order) by atomic rename, skipping unchanged ones; True if any changed.

    Callers list the key before its certificate, so a reader never pairs a new certificate with an old key
    (a reader that catches the key first sees a mismatched pair, refuses it and retries).
    """
    directory.mkdir(parents=True, exist_ok=True)
    changed = False
    for name, data in files.items():
        path = directory / name
        if path.exists() and path.read_bytes() == data:
            continue
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.chmod(tmp, 0o600)
        tmp.replace(path)
        changed = True
    return changed


def ensure_self_signed(directory: Path, dns_names: Sequence[str], ip_addresses: Sequence[str] = ()) -> None:
    """Put a self-signed `tls.crt`/`tls.key` in `directory` unless a pair is already there (as controller-runtime
    does for the metrics server)."""
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return
    pair = self_signed(datetime.now(UTC), dns_names, ip_addresses)
    write_files(directory, {"tls.key": pair.key_pem, "tls.crt": pair.cert_pem})

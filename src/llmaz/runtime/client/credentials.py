"""How a request proves who sends it: TLS material for the connection, headers for each request.

`TLSConfig` turns a kubeconfig's or the service account's certificates into an `ssl.SSLContext`. A `Credentials`
gives the Authorization header of the next request, so rotated tokens apply without a restart.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmaz.runtime.clock import REAL_CLOCK, Clock

# client-go re-reads a token file at most once a minute (transport.NewCachedFileTokenSource).
TOKEN_FILE_REREAD_PERIOD = 60.0


class ConfigError(ValueError):
    """The connection settings cannot be loaded; the message names the file, the field and what to fix."""


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """Certificates of one API server connection. `*_data` fields hold PEM bytes, `*_file` fields paths."""

    ca_file: str | None = None
    ca_data: bytes | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    insecure: bool = False
    server_name: str | None = None

    @property
    def is_default(self) -> bool:
        return self == _DEFAULT_TLS

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the CA (or the system store) and presents the client certificate."""
        try:
            ctx = ssl.create_default_context(
                cafile=self.ca_file,
                cadata=self.ca_data.decode("ascii", errors="replace") if self.ca_data else None,
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            source = self.ca_file or "certificate-authority-data"
            raise ConfigError(f"cluster CA {source}: {exc}; it must be a readable PEM certificate") from exc
        if self.cert_file or self.cert_data:
            try:
                self._load_client_certificate(ctx)
            except OSError as exc:
                source = self.cert_file or "client-certificate-data"
                raise ConfigError(f"client certificate {source}: {exc}; it and its key must be PEM") from exc
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _load_client_certificate(self, ctx: ssl.SSLContext) -> None:
        if self.cert_file and not (self.key_file or self.key_data):
            ctx.load_cert_chain(self.cert_file)
            return
        if not (self.key_file or self.key_data):
            raise ConfigError("a client certificate needs its key: set client-key or client-key-data")
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(self.cert_file, keyfile=self.key_file)
            return
        # ssl loads certificates only from files: in-memory PEM goes through a private directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="llmaz-tls-") as scratch:
            cert = self.cert_file or _write_private(Path(scratch, "tls.crt"), self.cert_data or b"")
            key = self.key_file or _write_private(Path(scratch, "tls.key"), self.key_data or b"")
            ctx.load_cert_chain(cert, keyfile=key)


_DEFAULT_TLS = TLSConfig()


def _write_private(path: Path, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return str(path)


def decode_pem_data(value: str, field: str) -> bytes:
    """A kubeconfig `*-data` field: base64 of PEM."""
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{field}: not valid base64 ({exc}); it must hold the base64 of a PEM file") from exc


class Credentials(Protocol):
    async def headers(self) -> dict[str, str]:
        """Headers proving the caller's identity on the next request (may be empty)."""
        ...


class Anonymous:
    async def headers(self) -> dict[str, str]:
        return {}


ANONYMOUS = Anonymous()


class StaticToken:
    def __init__(self, token: str) -> None:
        self._headers = {"Authorization": f"Bearer {token}"}

    async def headers(self) -> dict[str, str]:
        return self._headers


class BasicAuth:
    def __init__(self, username: str, password: str) -> None:
        encoded = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._headers = {"Authorization": f"Basic {encoded}"}

    async def headers(self) -> dict[str, str]:
        return self._headers


class TokenFile:
    """A bearer token kept in a file that is rewritten as it rotates (projected service account tokens).

    Re-read at most once per `period`; a read that fails keeps the last good token, so a rotation caught half
    written does not break requests, and the failure is raised only while no token was ever read.
    """

    def __init__(
        self, path: str | os.PathLike[str], period: float = TOKEN_FILE_REREAD_PERIOD, clock: Clock = REAL_CLOCK
    ) -> None:
        self.path = Path(path)
        self._period = period
        self._clock = clock
        self._token = ""
        self._read_at: float | None = None

    def refresh(self) -> None:
        """Read the file now; the next read is due `period` later."""
        self._read_at = self._clock.now()
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            if not self._token:
                raise ConfigError(f"token file {self.path}: {exc.strerror or exc}") from exc
            return
        if token:
            self._token = token
        elif not self._token:
            raise ConfigError(f"token file {self.path} is empty")

    async def headers(self) -> dict[str, str]:
        if self._read_at is None or self._clock.now() - self._read_at >= self._period:
            self.refresh()
        return {"Authorization": f"Bearer {self._token}"}


class PluginCredentials:
    """Credentials from a kubeconfig `exec` or `auth-provider` plugin, run by kubernetes_asyncio's loader.

    The loader's `Configuration` refreshes expiring tokens itself when asked for its auth settings.
    """

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration

    async def headers(self) -> dict[str, str]:
        cfg = self.configuration
        settings = await cfg.auth_settings()
        bearer = settings.get("BearerToken")
        if bearer and bearer.get("value"):
            return {"Authorization": str(bearer["value"])}
        if cfg.username or cfg.password:
            return {"Authorization": str(cfg.get_basic_auth_token())}
        return {}

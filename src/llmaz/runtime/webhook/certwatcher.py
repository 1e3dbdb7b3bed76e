"""A TLS server context whose certificate follows `tls.crt`/`tls.key` on disk, without a restart.

Invariants:
- Every new handshake uses the most recently loaded key pair: the listening context's SNI callback (which
  OpenSSL calls on every ClientHello, with or without SNI) switches the connection to the current context.
- A pair is swapped in only once it loads completely (matching key, readable PEM); a half-written or broken
  pair keeps the previous one serving and is retried on the next poll. Connections already open keep theirs.
- Files are polled every `interval` seconds (default 10 s, as controller-runtime's certwatcher) and compared
  by content, which also covers Secret-volume symlink swaps; `reload()` checks at once.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from llmaz.runtime.log import get_logger

DEFAULT_INTERVAL = 10.0


class CertWatcher:
    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        interval: float = DEFAULT_INTERVAL,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self.on_change = on_change
        self._current: ssl.SSLContext | None = None
        self._loaded: tuple[bytes, bytes] | None = None
        self._listening: ssl.SSLContext | None = None
        self._log = get_logger("llmaz.runtime.certwatcher").bind(cert=str(cert_file))

    @property
    def loaded(self) -> bool:
        return self._current is not None

    @property
    def certificate_pem(self) -> bytes | None:
        return self._loaded[0] if self._loaded else None

    def reload(self) -> bool:
        """Load the pair if its files changed; True if a new pair is now served. Never raises."""
        try:
            pair = (self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError as exc:
            self._log.debug("certificate not readable", error=repr(exc))
            return False
        if pair == self._loaded:
            return False
        try:
            context = self._context()
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._log.warning("certificate not loaded", error=repr(exc))
            return False
        self._current, self._loaded = context, pair
        self._log.info("certificate loaded")
        if self.on_change is not None:
            self.on_change()
        return True

    def _context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # HTTP/1.1 only: the mitigation controller-runtime users apply against HTTP/2 stream attacks.
        context.set_alpn_protocols(["http/1.1"])
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def server_context(self) -> ssl.SSLContext:
        """The context to listen with; requires a loaded pair (call `wait_loaded` first)."""
        if self._current is None:
            raise RuntimeError(f"no certificate loaded from {self.cert_file}")
        if self._listening is None:
            self._listening = self._context()
            self._listening.sni_callback = self._select
        return self._listening

    def _select(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        if self._current is not None:
            connection.context = self._current

    async def wait_loaded(self) -> None:
        """Poll (at least every second) until a pair loads."""
        while True:
            if self.reload() or self._current is not None:
                return
            await asyncio.sleep(min(self.interval, 1.0))

    async def watch(self) -> NoReturn:
        """Reload the pair every `interval` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.reload()

"""API keys: `Authorization: Bearer <key>` checked against a file of keys, re-read when it changes.

The file is meant to be a mounted Secret: one key per line; blank lines and lines starting with `#` are
ignored, surrounding whitespace is stripped. Kubernetes updates a mounted Secret by swapping a symlink, so a
change is noticed by `stat` (modification time, inode, size); the file is checked at most once per `interval`
seconds (default 5), on the request path, so an idle gateway does no I/O and a key rotation takes effect
within `interval` plus the kubelet's sync delay. Polling the file rather than watching the Secret keeps the
gateway's RBAC to the four kinds it routes by and lets the keys live in any file.

Invariants:
- Enabled or not is decided once, at start, by whether a file is configured: a file that later holds no key
  refuses every request; it never turns authentication off.
- A file that cannot be read at start is an error (the gateway does not start); one that cannot be re-read
  later keeps the last keys loaded (logged), so a rotation glitch neither locks everyone out nor lets anyone in.
- Keys are compared in constant time: every configured key is compared with the SHA-256 digest of the
  presented one, without stopping at a match, so timing reveals neither a key's prefix nor its length.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from llmaz.gateway.proxy import errors
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger

DEFAULT_INTERVAL = 5.0


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def parse_keys(text: str) -> frozenset[bytes]:
    """The digests of the keys a file holds (see the module docstring for the format)."""
    lines = (line.strip() for line in text.splitlines())
    return frozenset(_digest(line) for line in lines if line and not line.startswith("#"))


class ApiKeys:
    def __init__(self, path: Path, *, interval: float = DEFAULT_INTERVAL, clock: Clock = REAL_CLOCK) -> None:
        self.path = path
        self._interval = interval
        self._clock = clock
        self._digests: frozenset[bytes] = frozenset()
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = 0.0
        self._log = get_logger("llmaz.gateway.auth").bind(path=str(path))

    def load(self) -> int:
        """Read the file now; raises OSError (or UnicodeDecodeError) when it cannot. Returns the number of keys."""
        stat = os.stat(self.path)
        self._digests = parse_keys(self.path.read_text(encoding="utf-8"))
        self._stamp = (stat.st_mtime_ns, stat.st_ino, stat.st_size)
        self._checked_at = self._clock.now()
        return len(self._digests)

    def _refresh(self) -> None:
        now = self._clock.now()
        if now - self._checked_at < self._interval:
            return
        self._checked_at = now
        try:
            stat = os.stat(self.path)
            if (stat.st_mtime_ns, stat.st_ino, stat.st_size) == self._stamp:
                return
            count = self.load()
        except (OSError, UnicodeDecodeError) as exc:
            self._log.error("cannot re-read the API keys, keeping the last ones", error=str(exc))
            return
        self._log.info("API keys reloaded", keys=count)

    def allows(self, key: str) -> bool:
        self._refresh()
        presented = _digest(key)
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(digest, presented)
        return matched

    def check(self, authorization: str | None) -> None:
        """Raise the 401 OpenAIError unless `authorization` is `Bearer <a configured key>`."""
        scheme, _, key = (authorization or "").strip().partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise errors.missing_api_key()
        if not self.allows(key):
            raise errors.invalid_api_key()

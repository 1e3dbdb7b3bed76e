"""API keys: `Authorization: Bearer <key>` checked against a file of keys, re-read when it changes.

The file is meant to be a mounted Secret: one key per line; blank lines and lines starting with `#` are
ignored, surrounding whitespace is stripped. A line may name the key's tenant after the key: `<key> tenant=<name>`
(a line whose words after the first are not exactly one `tenant=<name>` is the key as a whole, as before); a key
without one is tenant `default`. File keys have no limits. Keys held in Secrets (`keys`), with their tenants and
limits, are checked beside the file's (`Authenticator`). Kubernetes updates a mounted Secret by swapping a symlink, so a
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

import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from llmaz.gateway.proxy import errors
from llmaz.gateway.proxy.keys import TENANT_PATTERN, KeyPolicy, SecretKeys, digest
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger

DEFAULT_INTERVAL = 5.0
DEFAULT_TENANT = "default"


def _line(line: str) -> tuple[bytes, str]:
    words = line.split()
    if len(words) == 2 and words[1].startswith("tenant="):
        tenant = words[1].removeprefix("tenant=")
        if TENANT_PATTERN.fullmatch(tenant):
            return digest(words[0]), tenant
    return digest(line), DEFAULT_TENANT


def parse_keys(text: str) -> dict[bytes, str]:
    """The digests of the keys a file holds, each with its tenant (see the module docstring for the format)."""
    lines = (line.strip() for line in text.splitlines())
    return dict(_line(line) for line in lines if line and not line.startswith("#"))


class ApiKeys:
    def __init__(self, path: Path, *, interval: float = DEFAULT_INTERVAL, clock: Clock = REAL_CLOCK) -> None:
        self.path = path
        self._interval = interval
        self._clock = clock
        self._digests: dict[bytes, str] = {}
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

    def tenant_of(self, presented: bytes) -> str | None:
        """The tenant of the key whose digest is `presented`, None when the file does not hold it."""
        self._refresh()
        found = None
        for key_digest, tenant in self._digests.items():
            if hmac.compare_digest(key_digest, presented):
                found = tenant
        return found

    def allows(self, key: str) -> bool:
        return self.tenant_of(digest(key)) is not None

    def check(self, authorization: str | None) -> None:
        """Raise the 401 OpenAIError unless `authorization` is `Bearer <a configured key>`."""
        if not self.allows(bearer_key(authorization)):
            raise errors.invalid_api_key()


def bearer_key(authorization: str | None) -> str:
    """The key of `Bearer <key>`; the 401 `missing_api_key` when there is none."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise errors.missing_api_key()
    return key


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the tenant of its key and, for a Secret's key, its policy (limits, may-wake)."""

    tenant: str
    policy: KeyPolicy | None = None

    @property
    def may_wake(self) -> bool:
        return self.policy is None or self.policy.may_wake


class Authenticator:
    """The keys file and the Secrets' keys, either or both: a key is accepted when either holds it (a Secret's
    first, so that its expiry and limits apply)."""

    def __init__(self, file: ApiKeys | None = None, secrets: SecretKeys | None = None, clock: Clock = REAL_CLOCK):
        self.file = file
        self.secrets = secrets
        self._clock = clock

    def check(self, authorization: str | None) -> Caller:
        """The caller of `Bearer <key>`, or the OpenAIError to answer: 401 for a missing, unknown, refused or
        expired key, 503 while the Secrets are not listed yet and the key is not in the file."""
        presented = digest(bearer_key(authorization))
        if self.secrets is not None:
            entry = self.secrets.find(presented)
            if entry is not None:
                if entry.policy is None:
                    raise errors.refused_api_key(entry.refused or "")
                expires = entry.policy.expires
                if expires is not None and self._clock.wall() >= expires:
                    refusal = errors.expired_api_key(expires)
                    refusal.tenant = entry.policy.tenant
                    raise refusal
                return Caller(entry.policy.tenant, entry.policy)
        tenant = self.file.tenant_of(presented) if self.file is not None else None
        if tenant is not None:
            return Caller(tenant)
        if self.secrets is not None and not self.secrets.has_synced():
            raise errors.not_ready()
        raise errors.invalid_api_key()

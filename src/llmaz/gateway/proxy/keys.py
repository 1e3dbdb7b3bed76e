"""API keys held in Secrets, read live: one Secret labelled `llmaz.io/api-key: "true"` in the gateway's namespace
is one key, its tenant and its limits (docs/tenancy.md, "API keys with identities and budgets").

A Secret's `data`:
- `key` (required): the key itself, as clients send it after `Bearer `;
- `tenant` (required): who the key belongs to, the `tenant` label of the per-tenant metrics: 1 to 63 of
  `A-Z a-z 0-9 - _ .`, starting and ending with a letter or digit;
- `requests-per-minute`, `tokens-per-minute`, `max-streams` (optional): positive integers, each a limit
  (`limits`); absent, that dimension is unlimited;
- `expires` (optional): an RFC 3339 time with an offset (`2026-12-31T23:59:59Z`), after which the key is refused;
- `may-wake` (optional): `"true"` (default) or `"false"`; a key that may not wake gets 503 rather than scaling a
  sleeping model up from zero.
- `priority` (optional): the flow-control band of the key's requests and the highest they may ask for, an integer
  from 0 to 9 (`flow.priority`; default 5).

Invariants:
- The key's plaintext never reaches the informer's cache: the informer's transform replaces it by its SHA-256
  digest, and drops every field but those above. Keys are compared in constant time: every Secret's digest is
  compared with the presented key's, without stopping at a match.
- A Secret with a bad value is refused whole, never half-applied: its key gets 401 (a key that worked with a limit
  missing would be unsafe). The reason, naming the Secret and the field, is logged at error level once per change
  of the Secret; the key's value is never logged.
- A Secret updated or deleted takes effect at the next request: no restart, no polling.
- Two Secrets holding the same key are both refused (which tenant and limits apply would be ambiguous).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from llmaz.gateway.flow.priority import PriorityError, parse_priority
from llmaz.runtime.cache import DeletedFinalStateUnknown, Informer, Obj, SharedInformerFactory
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource

SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
API_KEY_LABEL = "llmaz.io/api-key"
API_KEY_SELECTOR = f"{API_KEY_LABEL}=true"
# Only the Secrets of the gateway's own namespace: a Role, never a ClusterRole.
RBAC_RULES = (allow(SECRETS, "list", "watch", own_namespace=True),)

KEY = "key"
TENANT = "tenant"
REQUESTS_PER_MINUTE = "requests-per-minute"
TOKENS_PER_MINUTE = "tokens-per-minute"
MAX_STREAMS = "max-streams"
EXPIRES = "expires"
MAY_WAKE = "may-wake"
PRIORITY = "priority"
FIELDS = (KEY, TENANT, REQUESTS_PER_MINUTE, TOKENS_PER_MINUTE, MAX_STREAMS, EXPIRES, MAY_WAKE, PRIORITY)
# Where the transform puts the key's digest (hex) in place of the key.
KEY_DIGEST = "key-sha256"
TENANT_PATTERN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
# The largest limit accepted: far above any real budget, small enough that the arithmetic stays exact.
MAX_LIMIT = 10**12


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """Who a key is and what it may do."""

    tenant: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_streams: int | None = None
    expires: datetime | None = None
    may_wake: bool = True
    priority: int | None = None
    """The flow-control band of the key's requests, and the highest they may ask for; None: the default."""
    source: str = ""
    """Where the key comes from ("namespace/name" of its Secret, or "" for the keys file): limits are kept per
    source, so a rotated key keeps its budget."""

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.requests_per_minute, self.tokens_per_minute, self.max_streams))


@dataclass(frozen=True, slots=True)
class SecretEntry:
    """One labelled Secret: the digest of its key (None when it has none usable) and its policy, or why it is
    refused."""

    source: str
    digest: bytes | None
    policy: KeyPolicy | None
    refused: str | None = None


class SecretValueError(ValueError):
    pass


def compact_secret(obj: Obj) -> Obj:
    """The informer's transform: the Secret's name and the fields read here, with the key replaced by its digest,
    each value decoded from base64 (an undecodable one is kept as None, to be refused by name)."""
    meta = obj.get("metadata") or {}
    data = obj.get("data") or {}
    kept: dict[str, str | None] = {}
    if isinstance(data, dict):
        for name in FIELDS:
            if name not in data:
                continue
            try:
                text = base64.b64decode(str(data[name]), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                kept[KEY_DIGEST if name == KEY else name] = None
                continue
            if name == KEY:
                kept[KEY_DIGEST] = digest(text.strip()).hex() if text.strip() else ""
            else:
                kept[name] = text
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "data": kept,
    }


def _positive(data: dict[str, Any], name: str) -> int | None:
    if name not in data:
        return None
    text = data[name]
    if text is None or not re.fullmatch(r"[0-9]+", text.strip()) or not 0 < int(text.strip()) <= MAX_LIMIT:
        raise SecretValueError(f"data.{name} must be a positive integer (at most {MAX_LIMIT}), in decimal digits")
    return int(text.strip())


def _expires(data: dict[str, Any]) -> datetime | None:
    if EXPIRES not in data:
        return None
    text = data[EXPIRES]
    problem = f"data.{EXPIRES} must be an RFC 3339 time with an offset, like 2026-12-31T23:59:59Z"
    if text is None or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", text.strip()):
        raise SecretValueError(problem)
    try:
        return datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise SecretValueError(problem) from None


def _priority(data: dict[str, Any]) -> int | None:
    if PRIORITY not in data:
        return None
    try:
        return parse_priority(data[PRIORITY] or "")  # None: not decodable
    except PriorityError as err:
        raise SecretValueError(f"data.{PRIORITY} {err}") from None


def parse_secret(obj: Obj) -> SecretEntry:
    """A compacted Secret (`compact_secret`) read as a key, or refused with the field at fault named."""
    meta = obj.get("metadata") or {}
    source = f"{meta.get('namespace')}/{meta.get('name')}"
    data = obj.get("data") or {}
    hexdigest = data.get(KEY_DIGEST)
    key_digest = bytes.fromhex(hexdigest) if hexdigest else None
    try:
        if key_digest is None:
            raise SecretValueError(f"data.{KEY} must hold the key (base64 of a non-empty UTF-8 string)")
        tenant = (data.get(TENANT) or "").strip()
        if not TENANT_PATTERN.fullmatch(tenant):
            raise SecretValueError(
                f"data.{TENANT} must name the key's tenant: 1 to 63 letters, digits, '-', '_' or '.', starting and "
                "ending with a letter or digit"
            )
        may_wake = data.get(MAY_WAKE, "true")
        if may_wake is None or may_wake.strip() not in ("true", "false"):
            raise SecretValueError(f'data.{MAY_WAKE} must be "true" or "false"')
        policy = KeyPolicy(
            tenant=tenant,
            requests_per_minute=_positive(data, REQUESTS_PER_MINUTE),
            tokens_per_minute=_positive(data, TOKENS_PER_MINUTE),
            max_streams=_positive(data, MAX_STREAMS),
            expires=_expires(data),
            may_wake=may_wake.strip() == "true",
            priority=_priority(data),
            source=source,
        )
    except SecretValueError as err:
        return SecretEntry(source, key_digest, None, str(err))
    return SecretEntry(source, key_digest, policy)


class SecretKeys:
    """The keys of the labelled Secrets, kept up to date by the informer's events."""

    def __init__(self, informer: Informer, forget: Callable[[str], None] | None = None) -> None:
        """`forget(source)` is called when a Secret is deleted (the limits drop its state)."""
        self._informer = informer
        self._forget = forget
        self._entries: dict[str, SecretEntry] = {}
        self._log = get_logger("llmaz.gateway.auth")
        informer.add_event_handler(self)

    @classmethod
    def watch(
        cls, informers: SharedInformerFactory, namespace: str, forget: Callable[[str], None] | None = None
    ) -> SecretKeys:
        """Secret keys over an informer of the labelled Secrets of `namespace` (call before the factory starts)."""
        informer = informers.informer_for(SECRETS, namespace=namespace, label_selector=API_KEY_SELECTOR)
        informer.set_transform(compact_secret)
        return cls(informer, forget)

    def has_synced(self) -> bool:
        return self._informer.has_synced()

    def tenants(self) -> set[str]:
        return {e.policy.tenant for e in self._entries.values() if e.policy is not None}

    def find(self, presented: bytes) -> SecretEntry | None:
        """The entry whose key has digest `presented`, comparing with every entry (constant time); an entry
        refused when two Secrets hold the key."""
        found: list[SecretEntry] = []
        for entry in self._entries.values():
            if entry.digest is not None and hmac.compare_digest(entry.digest, presented):
                found.append(entry)
        if len(found) > 1:
            sources = ", ".join(sorted(e.source for e in found))
            return SecretEntry(found[0].source, presented, None, f"the same key is in several Secrets: {sources}")
        return found[0] if found else None

    # Informer events

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._set(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._set(new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            obj = obj.obj
        meta = obj.get("metadata") or {}
        source = f"{meta.get('namespace')}/{meta.get('name')}"
        if self._entries.pop(source, None) is not None:
            self._log.info("API key removed", secret=source)
        if self._forget is not None:
            self._forget(source)

    def _set(self, obj: Obj) -> None:
        entry = parse_secret(obj)
        previous = self._entries.get(entry.source)
        self._entries[entry.source] = entry
        if previous == entry:
            return
        if entry.refused is not None:
            self._log.error("API key Secret refused", secret=entry.source, reason=entry.refused)
        else:
            assert entry.policy is not None
            self._log.info("API key loaded", secret=entry.source, tenant=entry.policy.tenant)

"""Delegated authentication and authorization of HTTP callers through the API server, with short caches.

Authentication sends the bearer token in a TokenReview; authorization sends a SubjectAccessReview for a
non-resource URL and verb. Decisions are cached (authenticated tokens 60 s, unauthenticated 10 s; allowed 5 min,
denied 30 s), keyed by a hash of the token and by user/groups/verb/path, so a scrape every few seconds costs
no API calls. API failures raise `ApiError` (the caller answers 500); nothing is cached for them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from llmaz.runtime.client import Client
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.rbac import PolicyRule

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
RBAC_RULES = (
    PolicyRule("authentication.k8s.io", ("tokenreviews",), ("create",)),
    PolicyRule("authorization.k8s.io", ("subjectaccessreviews",), ("create",)),
)
REVIEW_TIMEOUT = 10.0

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


class TTLCache(Generic[V]):
    """A small LRU map whose entries expire; `max_entries` bounds memory against token spraying."""

    def __init__(self, clock: Clock, max_entries: int = 4096) -> None:
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[Any, tuple[float, V]] = OrderedDict()

    def get(self, key: Any) -> V | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock.now():
            self._entries.pop(key, None)
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: Any, value: V, ttl: float) -> None:
        self._entries[key] = (self._clock.now() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class CacheTTLs:
    authenticated: float = 60.0
    unauthenticated: float = 10.0
    allowed: float = 300.0
    denied: float = 30.0


class DelegatingAuth:
    def __init__(self, client: Client, ttls: CacheTTLs | None = None, clock: Clock = REAL_CLOCK) -> None:
        self.client = client
        self.ttls = ttls or CacheTTLs()
        self._tokens: TTLCache[User | bool] = TTLCache(clock)
        self._decisions: TTLCache[bool] = TTLCache(clock)

    async def authenticate(self, token: str) -> User | None:
        """The user the token belongs to, or None if the API server does not accept it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached if isinstance(cached, User) else None
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        result = await self.client.request("POST", TOKEN_REVIEWS, body=review, request_timeout=REVIEW_TIMEOUT)
        status = result.get("status") or {}
        if not status.get("authenticated"):
            self._tokens.put(key, False, self.ttls.unauthenticated)
            return None
        info = status.get("user") or {}
        user = User(
            info.get("username", ""), info.get("uid", ""), tuple(info.get("groups") or ()), info.get("extra") or {}
        )
        self._tokens.put(key, user, self.ttls.authenticated)
        return user

    async def authorize(self, user: User, verb: str, path: str) -> bool:
        """Whether `user` may `verb` the non-resource URL `path`."""
        key = (user.username, user.uid, user.groups, verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        result = await self.client.request("POST", SUBJECT_ACCESS_REVIEWS, body=review, request_timeout=REVIEW_TIMEOUT)
        allowed = bool((result.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, self.ttls.allowed if allowed else self.ttls.denied)
        return allowed

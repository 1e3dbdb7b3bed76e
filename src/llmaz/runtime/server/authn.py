"""Delegated authentication and authorization of HTTP callers through the API server, with short caches.

Authentication sends the bearer token in a TokenReview; authorization sends a SubjectAccessReview for a
non-resource URL and verb. Invariants:
- Decisions are cached (authenticated tokens and allowed requests 2 min; unauthenticated tokens and denials
  10 s, so a fixed binding or a new token takes effect soon), keyed by the SHA-256 of the token and by
  user/groups/verb/path, so a scrape every few seconds costs no API calls. The token itself is kept only while
  its review is in flight.
- Concurrent lookups of one key share one review: a burst of scrapes with one token makes one TokenReview.
- Each cache holds at most `max_entries` decisions, least recently used evicted first, so callers spraying
  random tokens or paths cost API calls (each unseen token must be asked about) but not memory.
- A token that cannot be a bearer token (not printable ASCII, or longer than `MAX_TOKEN_CHARS`) is refused
  without asking the API server.
- API failures raise `ApiError` (the caller answers 500); nothing is cached for them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
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
# Service account tokens are JWTs of about 1 KB; anything far longer is not a token the API server issued.
MAX_TOKEN_CHARS = 16 * 1024

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

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class CacheTTLs:
    authenticated: float = 120.0
    unauthenticated: float = 10.0
    allowed: float = 120.0
    denied: float = 10.0


class DelegatingAuth:
    def __init__(
        self, client: Client, ttls: CacheTTLs | None = None, clock: Clock = REAL_CLOCK, max_entries: int = 4096
    ) -> None:
        self.client = client
        self.ttls = ttls or CacheTTLs()
        self._tokens: TTLCache[User | bool] = TTLCache(clock, max_entries)
        self._decisions: TTLCache[bool] = TTLCache(clock, max_entries)
        self._pending: dict[Hashable, asyncio.Future[Any]] = {}

    @property
    def cached(self) -> tuple[int, int]:
        """(token decisions, authorization decisions) held."""
        return len(self._tokens), len(self._decisions)

    async def authenticate(self, token: str) -> User | None:
        """The user the token belongs to, or None if the API server does not accept it."""
        if not _plausible_token(token):
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached if isinstance(cached, User) else None
        found: User | bool = await self._once(("token", key), lambda: self._review_token(key, token))
        return found if isinstance(found, User) else None

    async def _review_token(self, key: str, token: str) -> User | bool:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        result = await self.client.request("POST", TOKEN_REVIEWS, body=review, request_timeout=REVIEW_TIMEOUT)
        status = result.get("status") or {}
        if not status.get("authenticated"):
            self._tokens.put(key, False, self.ttls.unauthenticated)
            return False
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
        allowed: bool = await self._once(("decision", key), lambda: self._review_access(key, user, verb, path))
        return allowed

    async def _once(self, key: Hashable, review: Callable[[], Awaitable[Any]]) -> Any:
        """The result of `review()`, shared with every concurrent caller asking for the same key.

        The review runs as its own task, so a caller that goes away (a closed connection) does not cancel it
        for the others.
        """
        task = self._pending.get(key)
        if task is None:
            task = asyncio.ensure_future(review())
            self._pending[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(task)

    def _forget(self, key: Hashable, task: asyncio.Future[Any]) -> None:
        self._pending.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved, so a failure whose callers all left is not reported as unhandled

    async def _review_access(self, key: Hashable, user: User, verb: str, path: str) -> bool:
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


def _plausible_token(token: str) -> bool:
    """Bearer tokens are printable ASCII (RFC 6750 token68); a header can carry any bytes."""
    return 0 < len(token) <= MAX_TOKEN_CHARS and token.isascii() and token.isprintable() and " " not in token

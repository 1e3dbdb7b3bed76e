"""Delegated auth: cached decisions expire after their TTL, the oldest go first beyond the bound, concurrent
lookups of one token share one review, and what cannot be a token costs no review."""

from __future__ import annotations

import asyncio
import secrets
import tracemalloc
from collections import Counter
from typing import Any, cast

import pytest

from llmaz.runtime.client import ApiError, Client
from llmaz.runtime.server.authn import (
    MAX_TOKEN_CHARS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    DelegatingAuth,
    TTLCache,
)
from llmaz_dev.testing.clock import FakeClock


def test_an_entry_is_served_until_its_ttl_passes() -> None:
    clock = FakeClock()
    cache: TTLCache[bool] = TTLCache(clock)
    cache.put("k", True, ttl=30)
    clock.step(29.9)
    assert cache.get("k") is True
    clock.step(0.2)
    assert cache.get("k") is None


def test_the_least_recently_used_entry_is_evicted_beyond_the_bound() -> None:
    cache: TTLCache[int] = TTLCache(FakeClock(), max_entries=2)
    cache.put("a", 1, 60)
    cache.put("b", 2, 60)
    assert cache.get("a") == 1
    cache.put("c", 3, 60)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


class Reviewer:
    """Answers reviews like the API server would: `good` tokens authenticate as "reader", who may get /metrics.

    Each review takes one event-loop turn, so concurrent callers really overlap.
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls[path] += 1
        await asyncio.sleep(0)
        if path == TOKEN_REVIEWS:
            good = body["spec"]["token"].startswith("good")
            return {"status": {"authenticated": good, "user": {"username": "reader"}} if good else {}}
        return {"status": {"allowed": body["spec"]["user"] == "reader"}}


def auth_with(reviewer: Reviewer, clock: FakeClock | None = None, max_entries: int = 4096) -> DelegatingAuth:
    return DelegatingAuth(cast(Client, reviewer), clock=clock or FakeClock(), max_entries=max_entries)


async def test_300_concurrent_requests_with_one_token_make_one_token_review_and_one_access_review() -> None:
    reviewer = Reviewer()
    auth = auth_with(reviewer)

    async def scrape() -> bool:
        user = await auth.authenticate("good-token")
        return user is not None and await auth.authorize(user, "get", "/metrics")

    assert all(await asyncio.gather(*(scrape() for _ in range(300))))
    assert all([await scrape() for _ in range(300)])
    assert reviewer.calls == {TOKEN_REVIEWS: 1, SUBJECT_ACCESS_REVIEWS: 1}


async def test_decisions_are_kept_two_minutes_and_refusals_ten_seconds() -> None:
    reviewer, clock = Reviewer(), FakeClock()
    auth = auth_with(reviewer, clock)
    user = await auth.authenticate("good-token")
    assert user is not None
    await auth.authorize(user, "get", "/metrics")
    assert await auth.authenticate("bad-token") is None
    clock.step(119)
    await auth.authenticate("good-token")
    await auth.authorize(user, "get", "/metrics")
    await auth.authenticate("bad-token")
    assert reviewer.calls == {TOKEN_REVIEWS: 3, SUBJECT_ACCESS_REVIEWS: 1}  # the refusal expired at 10 s
    clock.step(2)
    await auth.authenticate("good-token")
    await auth.authorize(user, "get", "/metrics")
    assert reviewer.calls == {TOKEN_REVIEWS: 4, SUBJECT_ACCESS_REVIEWS: 2}


async def test_random_tokens_beyond_the_cache_size_do_not_grow_it() -> None:
    reviewer = Reviewer()
    auth = auth_with(reviewer, max_entries=64)
    for _ in range(300):
        assert await auth.authenticate(secrets.token_urlsafe(32)) is None
    assert reviewer.calls[TOKEN_REVIEWS] == 300  # an unseen token can only be judged by asking
    assert auth.cached == (64, 0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            await auth.authenticate(secrets.token_urlsafe(32))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert auth.cached == (64, 0)
    assert grown < 64 * 1024, f"{grown} bytes kept for 3000 more tokens"


@pytest.mark.parametrize("token", ["", "has space", "ünïcode", "x" * (MAX_TOKEN_CHARS + 1), "\udcff", "tab\t"])
async def test_what_cannot_be_a_bearer_token_is_refused_without_asking(token: str) -> None:
    reviewer = Reviewer()
    assert await auth_with(reviewer).authenticate(token) is None
    assert not reviewer.calls


async def test_a_failed_review_is_shared_by_its_waiters_and_not_cached() -> None:
    class Failing(Reviewer):
        async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
            self.calls[path] += 1
            await asyncio.sleep(0)
            raise ApiError(503, "ServiceUnavailable", "unavailable")

    reviewer = Failing()
    auth = auth_with(reviewer)
    results = await asyncio.gather(*(auth.authenticate("good") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, ApiError) for r in results)
    assert reviewer.calls[TOKEN_REVIEWS] == 1
    with pytest.raises(ApiError):
        await auth.authenticate("good")
    assert reviewer.calls[TOKEN_REVIEWS] == 2

"""The delegated-auth cache: entries expire after their TTL and the oldest go first beyond the bound."""

from __future__ import annotations

from llmaz.runtime.authn import TTLCache
from llmaz.testing.clock import FakeClock


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

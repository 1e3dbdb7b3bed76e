"""Rate limiters (how long to wait before retrying an item) and the rate-limiting queue.

Every limiter answers three questions about an item: `when` (the delay before the next retry, and counts
that retry), `num_requeues` (retries since the last `forget`) and `forget` (the item succeeded: clear its
history). Limiters combine with `MaxOfRateLimiter`, which asks all of them and takes the longest delay.

`default_controller_rate_limiter()` is client-go's controller default: the max of a per-item exponential
backoff (5 ms doubling up to 1000 s) and one 10 qps / burst 100 token bucket shared by all items, which
bounds the total rate of retries however many items fail.

WARNING: call `forget` when an item succeeds. Without it the item's backoff keeps growing across
unrelated failures until it sits at the cap.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.workqueue.delaying import DelayingQueue
from llmaz.runtime.workqueue.queue import T


class RateLimiter(Protocol):
    def when(self, item: Hashable) -> float:
        """Seconds to wait before retrying `item`; records the retry."""
        ...

    def forget(self, item: Hashable) -> None: ...

    def num_requeues(self, item: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """Per-item backoff: `base * 2**n` seconds for retry n (from 0) since `forget`, capped at `max_delay`.

    Defaults (5 ms, 1000 s) are the controller defaults: 5 ms, 10 ms, 20 ms, ... 655.36 s, then 1000 s.
    """

    def __init__(self, base: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base = base
        self._max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        if failures >= 1000:  # 2**1000 and beyond is past any cap; skip the float overflow
            return self._max_delay
        return min(self._base * 2.0**failures, self._max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """One token bucket for all items: `burst` retries at once, then one every `1 / qps` seconds.

    `when` reserves a token and returns how long until it is available (tokens can go negative, so each
    further reservation waits one interval longer). It keeps no per-item history: `num_requeues` is always 0
    and `forget` does nothing.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock = REAL_CLOCK) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._updated_at = clock.now()

    def when(self, item: Hashable) -> float:
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._updated_at) * self._qps)
        self._updated_at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, item: Hashable) -> None:
        pass

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """Asks every limiter (so each records the retry) and answers with the longest delay and most requeues."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        return max([limiter.when(item) for limiter in self._limiters])

    def forget(self, item: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock = REAL_CLOCK) -> RateLimiter:
    """max(per-item 5 ms .. 1000 s exponential, 10 qps / burst 100 bucket): the classic controller default."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100, clock=clock))


class RateLimitingQueue(DelayingQueue[T]):
    """A `DelayingQueue` whose retries are spaced by a rate limiter.

    `rate_limiter` defaults to `default_controller_rate_limiter(clock)`.
    """

    def __init__(
        self, *, name: str | None = None, clock: Clock = REAL_CLOCK, rate_limiter: RateLimiter | None = None
    ) -> None:
        super().__init__(name=name, clock=clock)
        self.rate_limiter = rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock)

    def add_rate_limited(self, item: T) -> None:
        """Add `item` once the rate limiter says it may be retried."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Clear `item`'s retry history; it still needs `done`."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)

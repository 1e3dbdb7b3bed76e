"""A token bucket: the client's QPS/burst limiter and the event recorder's spam filter.

Invariant: at most `burst` tokens are ever stored, refilled at `qps` per second of the injected (monotonic)
clock. `reserve` may drive the balance negative; the caller then waits until its token has been refilled, so
concurrent callers are served in reservation order without a lock.
"""

from __future__ import annotations

from llmaz.runtime.clock import REAL_CLOCK, Clock


class TokenBucket:
    """`qps <= 0` disables limiting: every reservation is granted at once."""

    def __init__(self, qps: float, burst: int, clock: Clock = REAL_CLOCK) -> None:
        if qps > 0 and burst < 1:
            raise ValueError("burst must be at least 1 when qps is positive")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock.now()

    @property
    def unlimited(self) -> bool:
        return self._qps <= 0

    def _refill(self) -> None:
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now

    def try_take(self) -> bool:
        """Take a token if one is available now; never waits."""
        if self.unlimited:
            return True
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def reserve(self) -> float:
        """Take a token, possibly in advance; return how many seconds to wait before using it."""
        if self.unlimited:
            return 0.0
        self._refill()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    async def acquire(self) -> float:
        """Wait for a token; return the time waited (for the rate-limiter latency metric)."""
        delay = self.reserve()
        if delay > 0:
            await self._clock.sleep(delay)
        return delay

"""Reconnect backoff for reflectors: 0.8 s doubling to 30 s, each wait stretched by up to 100% jitter, and
back to 0.8 s once two minutes pass without a backoff (client-go's reflector constants; they cap a sick API
server at about 0.22 requests per second per reflector).
"""

from __future__ import annotations

import random

from llmaz.runtime.clock import REAL_CLOCK, Clock

INITIAL = 0.8
FACTOR = 2.0
MAXIMUM = 30.0
JITTER = 1.0
RESET_AFTER = 120.0


class ExponentialBackoff:
    def __init__(
        self,
        *,
        initial: float = INITIAL,
        factor: float = FACTOR,
        maximum: float = MAXIMUM,
        jitter: float = JITTER,
        reset_after: float = RESET_AFTER,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self._initial = initial
        self._factor = factor
        self._maximum = maximum
        self._jitter = jitter
        self._reset_after = reset_after
        self._clock = clock
        self._rng = rng or random.Random()
        self._current = initial
        self._last_start: float | None = None

    def next_delay(self) -> float:
        """The next wait. Calling it starts a backoff; a long gap since the previous one resets the growth."""
        now = self._clock.now()
        if self._last_start is not None and now - self._last_start > self._reset_after:
            self._current = self._initial
        self._last_start = now
        base = self._current
        self._current = min(self._current * self._factor, self._maximum)
        return base + self._rng.random() * self._jitter * base if self._jitter > 0 else base

    async def wait(self) -> float:
        delay = self.next_delay()
        await self._clock.sleep(delay)
        return delay

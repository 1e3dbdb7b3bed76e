"""Exponential backoff: the one helper behind every wait-before-retry of the runtime.

`Backoff` is a policy, after client-go's `wait.Backoff`: the n-th wait is `duration * factor**n`, stretched by
up to `jitter` of itself and then cut to `cap`, so `cap` is a hard upper bound on any single wait. Bounded retry
loops walk `delays()` (`steps` attempts, so `steps - 1` waits); `ExponentialBackoff` walks the same sequence
for loops that never give up (a reflector reconnecting) and starts over on `reset()`, or by itself once
`reset_after` seconds pass without a wait.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from llmaz.runtime.clock import REAL_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class Backoff:
    duration: float
    factor: float = 1.0
    jitter: float = 0.0
    cap: float | None = None
    steps: int | None = None
    """Attempts of a bounded retry; None for a sequence that never ends."""

    def base(self, step: int) -> float:
        """The wait before retry number `step` (from 0), before jitter and cap."""
        try:
            return self.duration * self.factor**step
        except OverflowError:  # far past any cap
            return math.inf

    def wait(self, step: int, rng: random.Random | None = None) -> float:
        """The wait before retry number `step` (from 0)."""
        base = self.base(step)
        if self.cap is not None and base >= self.cap:
            return self.cap
        stretched = base + (base * self.jitter * (rng or random).random() if self.jitter > 0 else 0.0)
        return min(stretched, self.cap) if self.cap is not None else stretched

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits between consecutive attempts: `steps - 1` of them, or endless when `steps` is None."""
        step = 0
        while self.steps is None or step < self.steps - 1:
            yield self.wait(step, rng)
            step += 1


class ExponentialBackoff:
    """Successive waits of a `Backoff` (its `steps` ignored), with the growth reset on demand.

    `reset_after` (default None: never) restarts the growth when that many seconds have passed since the
    previous wait began, as client-go's backoff manager does.
    """

    def __init__(
        self,
        policy: Backoff,
        *,
        reset_after: float | None = None,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self._reset_after = reset_after
        self._clock = clock
        self._rng = rng or random.Random()
        self._step = 0
        self._last_start: float | None = None

    def next_delay(self) -> float:
        """The next wait; asking for it counts as waiting it."""
        now = self._clock.now()
        idle = None if self._last_start is None else now - self._last_start
        if self._reset_after is not None and idle is not None and idle > self._reset_after:
            self._step = 0
        self._last_start = now
        delay = self.policy.wait(self._step, self._rng)
        # Once the cap is reached, counting on would change nothing.
        if self.policy.cap is None or self.policy.base(self._step) < self.policy.cap:
            self._step += 1
        return delay

    def reset(self) -> None:
        """Start over from `duration`: the trouble is over."""
        self._step = 0

    async def wait(self) -> float:
        delay = self.next_delay()
        await self._clock.sleep(delay)
        return delay

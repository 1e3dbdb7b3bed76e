"""Bounded retries of read-modify-write cycles that lose a resourceVersion race.

In a reconciler, prefer returning the Conflict and letting the rate-limited requeue retry from a fresh cache
read; `retry_on_conflict` is for code that must finish a write now (leader election, status writers).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from llmaz.runtime.client.errors import is_conflict
from llmaz.runtime.clock import REAL_CLOCK, Clock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """`steps` attempts; the n-th wait is duration * factor**n, stretched by up to `jitter` of itself."""

    steps: int
    duration: float
    factor: float = 1.0
    jitter: float = 0.0
    cap: float | None = None

    def delays(self, rng: random.Random | None = None) -> list[float]:
        """The waits between consecutive attempts (steps - 1 of them)."""
        rnd = rng or random
        out: list[float] = []
        d = self.duration
        for _ in range(max(0, self.steps - 1)):
            wait = d + (rnd.random() * self.jitter * d if self.jitter > 0 else 0.0)
            out.append(min(wait, self.cap) if self.cap is not None else wait)
            d *= self.factor
        return out


# client-go util/retry: DefaultRetry is for conflicts, DefaultBackoff for slower-resolving errors.
DEFAULT_RETRY = Backoff(steps=5, duration=0.010, factor=1.0, jitter=0.1)
DEFAULT_BACKOFF = Backoff(steps=4, duration=0.010, factor=5.0, jitter=0.1)


async def retry_on_conflict(
    fn: Callable[[], Awaitable[T]],
    backoff: Backoff = DEFAULT_RETRY,
    clock: Clock = REAL_CLOCK,
) -> T:
    """Run `fn` (which must re-read what it modifies) until it does not raise Conflict, at most `steps` times.

    The last Conflict propagates once the budget is spent; any other error propagates at once.
    """
    delays = backoff.delays()
    for delay in delays:
        try:
            return await fn()
        except Exception as exc:
            if not is_conflict(exc):
                raise
        await clock.sleep(delay)
    return await fn()

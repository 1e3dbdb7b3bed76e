"""Bounded retries of read-modify-write cycles that lose a resourceVersion race.

In a reconciler, prefer returning the Conflict and letting the rate-limited requeue retry from a fresh cache
read; `retry_on_conflict` is for code that must finish a write now (leader election, status writers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from llmaz.runtime.backoff import Backoff
from llmaz.runtime.client.errors import is_conflict
from llmaz.runtime.clock import REAL_CLOCK, Clock

T = TypeVar("T")

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
    if backoff.steps is None:
        raise ValueError("retry_on_conflict needs a Backoff with a number of steps")
    for delay in backoff.delays():
        try:
            return await fn()
        except Exception as exc:
            if not is_conflict(exc):
                raise
        await clock.sleep(delay)
    return await fn()

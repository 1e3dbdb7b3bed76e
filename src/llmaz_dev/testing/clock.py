"""A clock that moves only when the test says so.

`FakeClock.sleep()` parks the caller until the test advances time past its deadline with `step(seconds)` or
`set(now)`; `sleep(0)` (or a negative delay) returns after one event-loop turn, like `asyncio.sleep(0)`.

Limits, and how to live with them:

- Advancing time only resolves the sleepers' futures. The woken tasks run when the test next yields to the
  event loop (`await asyncio.sleep(0)`, or awaiting something those tasks produce, such as a queue `get`).
- Time jumps: a sleeper whose deadline was passed by a big `step` wakes once, with `now()` already at the new
  time. Code that loops over short sleeps sees one wake-up per step, not one per period.
- A step that happens before the code under test has started sleeping wakes nothing. Use `wait_for_sleepers`
  to let the code reach its sleep first, or wait with `eventually(clock.stepping(check))`, which steps to the
  next deadline each time the check fails.
- Only code that takes the clock as a dependency is affected. Library timeouts (`asyncio.timeout`,
  `asyncio.wait_for`) and the event loop's own timers keep using real time.
- `now()` is monotonic: time can only move forward.
- Deadlines are floats: `step(29.9)` then `step(0.1)` may land an ulp short of `start + 30`. When the exact
  instant matters, `set()` the deadline computed the same way the code computes it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from llmaz_dev.testing.waiting import eventually

T = TypeVar("T")

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


class FakeClock:
    """A `llmaz.runtime.clock.Clock`: `now()` starts at `start`, `wall()` is `wall_start + elapsed`."""

    def __init__(self, start: float = 1000.0, wall_start: datetime = _EPOCH) -> None:
        self._start = start
        self._now = start
        self._wall_start = wall_start
        self._sequence = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def wall(self) -> datetime:
        return self._wall_start + timedelta(seconds=self._now - self._start)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._sequence), wake))
        try:
            await wake
        except asyncio.CancelledError:
            self._sleepers = [sleeper for sleeper in self._sleepers if sleeper[2] is not wake]
            heapq.heapify(self._sleepers)
            raise

    def step(self, seconds: float) -> None:
        """Advance time by `seconds` and wake, earliest deadline first, every sleeper now due."""
        if seconds < 0:
            raise ValueError("a FakeClock cannot go backwards")
        self.set(self._now + seconds)

    def set(self, now: float) -> None:
        """Move time forward to `now` and wake every sleeper now due."""
        if now < self._now:
            raise ValueError("a FakeClock cannot go backwards")
        self._now = now
        while self._sleepers and self._sleepers[0][0] <= now:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)

    @property
    def sleepers(self) -> int:
        """Tasks currently parked in `sleep`."""
        return sum(1 for _, _, wake in self._sleepers if not wake.done())

    def next_deadline(self) -> float | None:
        """The earliest time a parked sleeper wakes, if any."""
        deadlines = [deadline for deadline, _, wake in self._sleepers if not wake.done()]
        return min(deadlines, default=None)

    async def wait_for_sleepers(self, count: int = 1, within: float = 5.0) -> None:
        """Wait until at least `count` tasks are sleeping on this clock; fail after `within` seconds."""
        await eventually(lambda: self.sleepers >= count, within, f"{count} sleeper(s) on the FakeClock")

    def stepping(self, check: Callable[[], T]) -> Callable[[], T]:
        """`check`, for `eventually`, moving this clock to its next deadline whenever `check` fails, so the timers,
        backoffs and delays of the code under test fire while the test waits."""

        def step_then_check() -> T:
            result = check()
            if not result and (deadline := self.next_deadline()) is not None:
                self.set(deadline)
            return result

        return step_then_check

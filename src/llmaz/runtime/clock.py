"""Time as a dependency: queues, limiters, reflector backoff and leader election take a Clock.

Deadlines and delays use the monotonic clock; `wall()` is only for timestamps written to the API (Lease renew
times, Event timestamps). Tests step `llmaz_dev.testing.FakeClock` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall(self) -> datetime:
        """Timezone-aware UTC wall-clock time."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


REAL_CLOCK = RealClock()

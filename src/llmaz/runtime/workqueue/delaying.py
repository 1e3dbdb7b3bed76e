"""A work queue that can also add an item after a delay (client-go's delaying queue).

Promises, on top of `Queue`'s:

- `add_after(item, delay)` adds `item` once `delay` seconds have passed on the injected clock; a delay of
  zero or less adds it at once. Ignored during shutdown.
- Items become ready earliest-deadline first (ties in the order they were scheduled).
- Scheduling an item that is already waiting keeps the earlier deadline: a wait is never postponed.
- An immediate `add` does not cancel a pending delayed one; when that fires it collapses into the existing
  dirty entry if the item has not been handed out yet.

A single timer task owns the heap of waiting items. It sleeps until the earliest deadline (at most
`MAX_WAIT` at a time, as a safety net), is woken early when a new earliest deadline arrives, and exits when
nothing is waiting, so an idle queue has no background task. Shutdown cancels it and drops waiting items.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Generic

from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.workqueue.queue import Queue, T

MAX_WAIT = 10.0
"""The timer re-checks the heap at least this often (seconds), whatever the deadlines say."""


@dataclass(order=True, slots=True)
class _Waiting(Generic[T]):
    ready_at: float
    sequence: int
    item: T = field(compare=False)
    superseded: bool = field(default=False, compare=False)


class DelayingQueue(Queue[T]):
    """A `Queue` with `add_after`. Invariant: `_waiting[item]` is the one live heap entry for `item`."""

    def __init__(self, *, name: str | None = None, clock: Clock = REAL_CLOCK) -> None:
        super().__init__(name=name, clock=clock)
        self._heap: list[_Waiting[T]] = []
        self._waiting: dict[T, _Waiting[T]] = {}
        self._sequence = itertools.count()
        self._timer: asyncio.Task[None] | None = None
        self._timer_wake: asyncio.Future[None] | None = None

    def add_after(self, item: T, delay: float) -> None:
        """Add `item` after `delay` seconds; keeps an earlier deadline if `item` is already waiting."""
        if self.shutting_down:
            return
        self._metrics.retried()
        if delay <= 0:
            self.add(item)
            return
        ready_at = self._clock.now() + delay
        current = self._waiting.get(item)
        if current is not None:
            if current.ready_at <= ready_at:
                return
            current.superseded = True
        entry = _Waiting(ready_at, next(self._sequence), item)
        heapq.heappush(self._heap, entry)
        self._waiting[item] = entry
        self._ensure_timer(new_earliest=self._heap[0] is entry)

    @property
    def waiting(self) -> int:
        """Items scheduled by `add_after` whose delay has not passed yet."""
        return len(self._waiting)

    def _begin_shutdown(self) -> None:
        super()._begin_shutdown()
        self._heap.clear()
        self._waiting.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _ensure_timer(self, *, new_earliest: bool) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(
                self._run_timer(), name=f"workqueue-timer-{self.name or 'unnamed'}"
            )
        elif new_earliest and self._timer_wake is not None and not self._timer_wake.done():
            self._timer_wake.set_result(None)

    async def _run_timer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock.now()
            self._add_ready(now)
            if not self._heap:
                self._timer = None
                return
            self._timer_wake = loop.create_future()
            sleeper = loop.create_task(self._clock.sleep(min(self._heap[0].ready_at - now, MAX_WAIT)))
            try:
                await asyncio.wait((sleeper, self._timer_wake), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                self._timer_wake = None

    def _add_ready(self, now: float) -> None:
        """Pop every entry whose deadline has passed, earliest first, and add it; drop superseded ones."""
        while self._heap and (self._heap[0].superseded or self._heap[0].ready_at <= now):
            entry = heapq.heappop(self._heap)
            if entry.superseded:
                continue
            del self._waiting[entry.item]
            self.add(entry.item)

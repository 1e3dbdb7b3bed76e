"""The work queue at the heart of every controller, with client-go's semantics.

Promises:

- Fair: items are handed out in the order they were first added (FIFO).
- Stingy: an item is never handed to two workers at once, and adding an item that is already waiting is a
  no-op, so a burst of adds for one key collapses into one unit of work.
- Re-add while processing: adding an item that a worker holds does not queue it yet; when the worker calls
  `done`, the item is queued again and is then delivered exactly once, however many adds happened meanwhile.
- Shutdown: after `shut_down()` adds are ignored, workers still receive the items already queued, and
  `get` raises `QueueShutDownError` once the queue is empty. `shut_down_with_drain()` also waits until no
  item is being processed (a later `shut_down()` stops that wait early).

Invariants, true between any two awaits (the queue lives on one event loop and has no locks):

- every item in `_fifo` is in `_dirty` and not in `_processing`, and appears in `_fifo` once;
- an item in both `_dirty` and `_processing` was re-added while being processed and is queued by `done`;
- `_dirty` is "everything that still needs processing", so its size is the `workqueue_depth` metric.

Every `get` must be paired with a `done` (in a `finally`), or the item is never handed out again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.workqueue.metrics import queue_metrics

T = TypeVar("T", bound=Hashable)


class QueueShutDownError(Exception):
    """Raised by `get` when the queue is shutting down and nothing is left to hand out."""


class Queue(Generic[T]):
    """A FIFO work queue with a dirty set and a processing set.

    `name` enables the `workqueue_*` metrics (an unnamed queue records none); `clock` times them and
    defaults to the real monotonic clock.
    """

    def __init__(self, *, name: str | None = None, clock: Clock = REAL_CLOCK) -> None:
        self.name = name
        self._clock = clock
        self._metrics = queue_metrics(name, clock)
        self._fifo: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._draining = False
        self._processing_changed = asyncio.Event()

    def add(self, item: T) -> None:
        """Mark `item` as needing processing. Ignored during shutdown and when it is already waiting."""
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        self._metrics.added(item, len(self._dirty))
        if item in self._processing:
            return  # deferred: `done` queues it
        self._fifo.append(item)
        self._wake_one_getter()

    def __len__(self) -> int:
        """Items queued and ready to be handed out (not those being processed or waiting for a delay)."""
        return len(self._fifo)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    async def get(self) -> T:
        """Wait for the next item and mark it processing; `QueueShutDownError` once shut down and empty."""
        while not self._fifo:
            if self._shutting_down:
                raise QueueShutDownError
            await self._wait_for_item()
        item = self._fifo.popleft()
        self._dirty.discard(item)
        self._processing.add(item)
        self._metrics.got(item, len(self._dirty))
        return item

    def done(self, item: T) -> None:
        """Mark `item` processed; if it was added again meanwhile, queue it now. No-op if not processing."""
        if item not in self._processing:
            return
        self._processing.discard(item)
        self._metrics.done(item)
        if item in self._dirty:
            self._fifo.append(item)
            self._wake_one_getter()
        elif not self._processing:
            self._processing_changed.set()

    def shut_down(self) -> None:
        """Stop accepting adds and wake every waiting `get`; also ends any `shut_down_with_drain` wait."""
        self._draining = False
        self._begin_shutdown()

    async def shut_down_with_drain(self) -> None:
        """Like `shut_down`, then wait until no item is being processed.

        Workers must keep calling `done`, or this waits forever (unless `shut_down()` is called).
        """
        self._draining = True
        self._begin_shutdown()
        while self._processing and self._draining:
            self._processing_changed.clear()
            await self._processing_changed.wait()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        self._processing_changed.set()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    async def _wait_for_item(self) -> None:
        getter = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            await getter
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():
                self._wake_one_getter()  # pass on a wake-up this cancelled getter can no longer use
            elif getter in self._getters:
                self._getters.remove(getter)
            raise

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

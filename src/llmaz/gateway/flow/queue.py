"""One model's queue of waiting requests: the discipline alone, pure (no I/O, no event loop; time is passed in).

- **Bands.** Every waiter has a band (its priority); `pop` always takes from the highest band that has waiters.
- **Fair sharing within a band.** Between the tenants waiting in a band, the one served the fewest tokens goes
  next (start-time fair queueing by tokens): each tenant of the band has a count of the tokens its dispatched
  requests cost, and `pop` takes the head of the tenant with the smallest count (ties: the tenant whose head waited
  longest). A tenant that starts waiting again joins at the smallest count of those already waiting, so time spent
  idle banks no credit, and a tenant sending few requests is never made to wait behind a busy one's backlog. The
  cost of a request is an estimate made before it is sent; `settle` corrects its tenant's count with what the
  engine reported. So two tenants that both keep waiters queued are served equal tokens, whatever the ratio of
  their arrivals.
- **Bounded.** At most `max_size` waiters. A push onto a full queue sheds the newest waiter of the lowest band
  present, the arrival included: a higher band never loses its place to a lower one, and within the lowest band
  those already waiting keep theirs.
- **TTL.** A waiter that has waited its TTL is taken out by `expire`; `pop` never hands one out. The TTL is the
  queue's `ttl`, or the waiter's own when it has one (a request held while its model wakes waits longer).
- Memory: the waiters, one count per tenant with waiters in a band (a band's counts go with its last waiter), and
  a heap of deadlines whose entries of waiters gone before their deadline are dropped once they outnumber the
  waiters.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class Waiter:
    """One request waiting: its band, its tenant ("" without API keys), its cost in tokens, when it arrived, and
    its own TTL (None: the queue's)."""

    band: int
    tenant: str
    cost: int
    arrived: float
    ttl: float | None = None
    seq: int = field(default=-1, init=False)
    """Its place in arrival order, set by `push`."""
    deadline: float = field(default=0.0, init=False)
    """When its TTL ends, set by `push`."""
    queued: bool = field(default=False, init=False)
    """Whether it is in the queue now."""


@dataclass(slots=True)
class _Band:
    waiting: dict[str, deque[Waiter]] = field(default_factory=dict)
    """Per tenant, its waiters oldest first; only tenants with waiters."""
    served: dict[str, float] = field(default_factory=dict)
    """Per tenant with waiters, the tokens its dispatched requests cost (relative to the others')."""

    def add(self, waiter: Waiter) -> None:
        queue = self.waiting.get(waiter.tenant)
        if queue is None:
            # Joins at the least served of those waiting: no credit is banked while idle, and none is owed.
            self.served[waiter.tenant] = min(self.served.values(), default=0.0)
            queue = self.waiting[waiter.tenant] = deque()
        queue.append(waiter)

    def drop_if_empty(self, tenant: str) -> None:
        if not self.waiting.get(tenant):
            self.waiting.pop(tenant, None)
            self.served.pop(tenant, None)

    def next_tenant(self) -> str:
        return min(self.waiting, key=lambda t: (self.served[t], self.waiting[t][0].seq))

    def newest(self) -> Waiter:
        return max((queue[-1] for queue in self.waiting.values()), key=lambda w: w.seq)


class FlowQueue:
    def __init__(self, max_size: int, ttl: float) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        if not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl}")
        self.max_size = max_size
        self.ttl = ttl
        self._bands: dict[int, _Band] = {}
        self._size = 0
        self._order = itertools.count()
        self._deadlines: list[tuple[float, int, Waiter]] = []
        """(deadline, seq, waiter) of every queued waiter, and of some gone since (skipped, then compacted)."""

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Waiter]:
        """Every waiter, highest band first, each band's tenants in turn oldest first (for tests and metrics)."""
        for band in sorted(self._bands, reverse=True):
            for queue in self._bands[band].waiting.values():
                yield from queue

    def push(self, waiter: Waiter) -> Waiter | None:
        """Queue `waiter`; when the queue was full, the waiter shed to make room (possibly `waiter` itself, which is
        then not queued), else None."""
        if waiter.ttl is not None and not waiter.ttl > 0:
            raise ValueError(f"a waiter's ttl must be a positive number of seconds, got {waiter.ttl}")
        waiter.seq = next(self._order)
        shed = None
        if self._size >= self.max_size:
            lowest = min(self._bands)
            if waiter.band <= lowest:  # the arrival is the newest of the lowest band present
                return waiter
            shed = self._bands[lowest].newest()
            self.remove(shed)
        self._bands.setdefault(waiter.band, _Band()).add(waiter)
        self._size += 1
        waiter.queued = True
        waiter.deadline = waiter.arrived + (self.ttl if waiter.ttl is None else waiter.ttl)
        heapq.heappush(self._deadlines, (waiter.deadline, waiter.seq, waiter))
        return shed

    def top_band(self) -> int | None:
        """The band `pop` takes from next, None when the queue is empty."""
        return max(self._bands) if self._bands else None

    def pop(self) -> Waiter | None:
        """The next waiter to dispatch (highest band, then the tenant served least), charged to its tenant; None
        when the queue is empty."""
        if not self._bands:
            return None
        number = max(self._bands)
        band = self._bands[number]
        tenant = band.next_tenant()
        waiter = band.waiting[tenant].popleft()
        band.served[tenant] += waiter.cost
        self._taken(number, band, tenant, waiter)
        return waiter

    def remove(self, waiter: Waiter) -> bool:
        """Take `waiter` out (its client went away, or it is shed); False when it is not queued."""
        band = self._bands.get(waiter.band)
        queue = None if band is None else band.waiting.get(waiter.tenant)
        if band is None or queue is None or waiter not in queue:
            return False
        queue.remove(waiter)
        self._taken(waiter.band, band, waiter.tenant, waiter)
        return True

    def expire(self, now: float) -> list[Waiter]:
        """Take out and return every waiter whose TTL has ended at `now`, oldest first."""
        expired: list[Waiter] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, waiter = heapq.heappop(self._deadlines)
            if waiter.queued:
                band = self._bands[waiter.band]
                band.waiting[waiter.tenant].remove(waiter)
                self._taken(waiter.band, band, waiter.tenant, waiter)
                expired.append(waiter)
        expired.sort(key=lambda w: w.seq)
        return expired

    def next_deadline(self) -> float | None:
        """When the first waiter's TTL ends, None when nothing waits."""
        while self._deadlines and not self._deadlines[0][2].queued:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def settle(self, band: int, tenant: str, correction: float) -> None:
        """Correct `tenant`'s count in `band` by what a dispatched request really cost beyond its estimate (negative
        when it cost less); nothing when the tenant no longer waits there (its count is gone with its waiters)."""
        found = self._bands.get(band)
        if found is not None and tenant in found.served:
            found.served[tenant] += correction

    def _taken(self, number: int, band: _Band, tenant: str, waiter: Waiter) -> None:
        self._size -= 1
        waiter.queued = False
        band.drop_if_empty(tenant)
        if not band.waiting:
            del self._bands[number]
        if len(self._deadlines) > 2 * self._size + 16:  # mostly waiters gone before their deadline
            self._deadlines = [entry for entry in self._deadlines if entry[2].queued]
            heapq.heapify(self._deadlines)

"""The requests in flight through this gateway replica, counted in one place for everyone who needs them.

A request counts for its model from the moment it is routed to the end of its answer (`started`/`finished`, or
the `request` block), and for an endpoint while an attempt to that endpoint is sent and relayed
(`acquire`/`release`). The pickers read the endpoint counts, the metrics' in-flight gauge and idle detection
(scale to zero) the model counts, and idle detection the time each model's last request started or ended here
(`last_request`, on the wall clock), so a request that starts and ends between two looks still counts. Watchers
added with `watch` hear every change of a model's count, synchronously, and must only record it or schedule work.

Each endpoint's recent releases are kept for RELEASE_HORIZON seconds (`released_since`): an engine's own count,
read a moment ago, may still include requests that have ended since, and the next turn of a conversation comes
the moment the previous one ends. Its recent acquisitions are kept the same way (`acquired_since`): flow control
counts what was sent to an engine since its count was read.

Invariants:
- A count is the number of `started` (`acquire`) calls not yet matched by `finished` (`release`); it never goes
  below zero, and models and endpoints with nothing in flight are not stored, so the tables hold only what is busy
  whatever the churn. Releases (and acquisitions) are kept for at most MAX_RELEASING_ENDPOINTS endpoints,
  MAX_RELEASES each.
- Nothing here awaits: a pick and the `acquire` that follows it see the same counts.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator

from llmaz.gateway.routing.routes import Endpoint

# Longer than an engine-metrics sample is ever used (its freshness bound), short enough to stay small.
RELEASE_HORIZON = 10.0
# Releases remembered per endpoint, and endpoints with recent releases: a bound whatever the traffic.
MAX_RELEASES = 1024
MAX_RELEASING_ENDPOINTS = 4096

Watcher = Callable[[str, int], None]
"""Called with (model, requests of that model now in flight) after every change."""


class InFlight:
    def __init__(
        self, *, wall_clock: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._now = wall_clock
        self._clock = clock
        self._released: OrderedDict[Endpoint, deque[float]] = OrderedDict()
        self._acquired: OrderedDict[Endpoint, deque[float]] = OrderedDict()
        self._last: dict[str, float] = {}
        self._models: dict[str, int] = {}
        self._endpoints: dict[Endpoint, int] = {}
        self._watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    # Per model

    def started(self, model: str) -> None:
        self._set(model, self._models.get(model, 0) + 1)

    def finished(self, model: str) -> None:
        self._set(model, max(0, self._models.get(model, 0) - 1))

    @contextlib.contextmanager
    def request(self, model: str) -> Iterator[None]:
        """Count a request of `model` for the block, however it ends."""
        self.started(model)
        try:
            yield
        finally:
            self.finished(model)

    def of_model(self, model: str) -> int:
        return self._models.get(model, 0)

    def last_request(self, model: str) -> float | None:
        """When a request of `model` last started or ended here (seconds since the epoch), or None."""
        return self._last.get(model)

    def _set(self, model: str, count: int) -> None:
        self._last[model] = self._now()
        if count:
            self._models[model] = count
        else:
            self._models.pop(model, None)
        for watcher in self._watchers:
            watcher(model, count)

    # Per endpoint

    def acquire(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint] = self._endpoints.get(endpoint, 0) + 1
        self._remember(self._acquired, endpoint)

    def release(self, endpoint: Endpoint) -> None:
        left = self._endpoints.get(endpoint, 0) - 1
        if left > 0:
            self._endpoints[endpoint] = left
        else:
            self._endpoints.pop(endpoint, None)
        self._remember(self._released, endpoint)

    def _remember(self, table: OrderedDict[Endpoint, deque[float]], endpoint: Endpoint) -> None:
        now = self._clock()
        times = table.get(endpoint)
        if times is None:
            times = table[endpoint] = deque(maxlen=MAX_RELEASES)
            while len(table) > MAX_RELEASING_ENDPOINTS:
                table.popitem(last=False)
        else:
            table.move_to_end(endpoint)
        times.append(now)
        while times and times[0] < now - RELEASE_HORIZON:
            times.popleft()

    def released_since(self, endpoint: Endpoint, since: float) -> int:
        """Attempts to `endpoint` that ended here after `since` (monotonic seconds, within RELEASE_HORIZON)."""
        return _count_since(self._released.get(endpoint), since)

    def acquired_since(self, endpoint: Endpoint, since: float) -> int:
        """Attempts to `endpoint` that started here after `since` (monotonic seconds, within RELEASE_HORIZON)."""
        return _count_since(self._acquired.get(endpoint), since)

    def outstanding(self, endpoint: Endpoint) -> int:
        return self._endpoints.get(endpoint, 0)

    def busy(self) -> dict[Endpoint, int]:
        """A copy of the table of busy endpoints (for tests and debugging)."""
        return dict(self._endpoints)


def _count_since(times: deque[float] | None, since: float) -> int:
    if not times:
        return 0
    count = 0
    for at in reversed(times):
        if at <= since:
            break
        count += 1
    return count

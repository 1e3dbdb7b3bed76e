"""Homes for prompt prefixes: each active prefix has one endpoint, and the active prefixes are spread evenly.

An engine's prefix cache holds a few prompts. A router that sends each prefix to the first endpoint of its ring
(consistent hashing) leaves the prefixes unevenly spread: 8 prefixes over 4 endpoints come out 2/2/2/2 only a few
times in a hundred, and the endpoint with 4 thrashes its cache while another holds 1. `PrefixHomes` balances the
prefixes themselves (their footprint), not the requests:

- A prefix (a request's ring key, `prefix.RoutingKey.ring`: its session, or its prompt's start) is active from its
  first attempt until no attempt of it has been sent for `idle_after` seconds. An active prefix keeps its home.
- A prefix without a home gets the first endpoint on its ring walk whose active prefixes stay within the bound:
  homes + 1 <= ceil(load_factor x (active prefixes of the candidates + 1) / candidates), consistent hashing with
  bounded loads over prefixes (the default factor 1: as even as the count allows). The home is recorded when the
  prefix's first attempt is sent (`pre_request`), so scheduling stays free of state changes.
- The order a request's candidates are scored in (`scheduler.Order`) is its home first, then the ring walk from
  its key. The prefix scorer counts the first in that order as a full match for a prefix no endpoint holds, so a
  prefix's requests go home; the request bound (`filters.WithinBound`) still moves a request on when its home is
  overloaded, and the home is kept for the next.
- A home whose endpoint left the candidates (a pod replaced, an adapter not held) is not used; a new one is
  recorded by the prefix's next attempt when its endpoint has left for good.

Two replicas that see the prefixes arrive in the same order give them the same homes (ring walks and bounds are
the same everywhere). Where they saw them in another order, each replica's answers correct it: an attempt whose
engine reports clearly more cached tokens than this replica predicted found the prefix where another replica put
it, and the prefix's home moves there (`adopt`), so replicas converge on one home per prefix. A restarted replica
starts with no homes and converges the same way.

Memory is bounded: at most `max_homes` prefixes (the least recently sent go first).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import Order, Plugin, Request

# A prefix not sent for this long is no longer active: engines' caches have moved on from most prefixes by then.
DEFAULT_IDLE_AFTER: Final = 120.0
DEFAULT_MAX_HOMES: Final = 65536
DEFAULT_HOME_FACTOR: Final = 1.0


@dataclass(slots=True)
class _Home:
    endpoint: Endpoint
    sent_at: float


class PrefixHomes(Plugin):
    """The home of each active prefix (see the module docstring); the scheduler's `Order` and a plugin whose
    `pre_request` records homes."""

    name = "prefix-homes"

    def __init__(
        self,
        rings: Order,
        *,
        load_factor: float = DEFAULT_HOME_FACTOR,
        idle_after: float = DEFAULT_IDLE_AFTER,
        max_homes: int = DEFAULT_MAX_HOMES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not load_factor >= 1:
            raise ValueError(f"the home load factor must be at least 1, got {load_factor}")
        self.rings = rings
        self.load_factor = load_factor
        self.idle_after = idle_after
        self.max_homes = max_homes
        self._clock = clock
        self._homes: OrderedDict[int, _Home] = OrderedDict()  # by ring key, least recently sent first
        self._count: dict[Endpoint, int] = {}

    def home(self, candidates: Sequence[Endpoint], key: RoutingKey) -> int | None:
        """The position in `candidates` of `key`'s home: its recorded one while it is a candidate, else the one it
        would get now. None without candidates."""
        self._expire()
        found = self._homes.get(key.ring)
        if found is not None:
            for position, endpoint in enumerate(candidates):
                if endpoint == found.endpoint:
                    return position
        return self._assign(candidates, key, exclude=None if found is None else found.endpoint)

    def order(self, candidates: Sequence[Endpoint], key: RoutingKey) -> Iterator[int]:
        """The positions of `candidates`: `key`'s home first, then its ring walk (`scheduler.Order`)."""
        home = self.home(candidates, key)
        if home is not None:
            yield home
        for position in self.rings.order(candidates, key):
            if position != home:
                yield position

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        key = request.key
        if key is None:
            return
        now = self._clock()
        found = self._homes.get(key.ring)
        if found is not None and (found.endpoint in request.candidates or found.endpoint == endpoint):
            found.sent_at = now
            self._homes.move_to_end(key.ring)
            return
        self._set(key.ring, endpoint, now)  # where its prompt is now cached, even if the bound moved it on

    def adopt(self, key: RoutingKey, endpoint: Endpoint) -> None:
        """`endpoint` holds `key`'s prefix though this replica did not send it there: make it the prefix's home."""
        found = self._homes.get(key.ring)
        if found is not None and found.endpoint != endpoint:
            self._set(key.ring, endpoint, self._clock())

    def home_of(self, key: RoutingKey) -> Endpoint | None:
        """The recorded home of `key`'s prefix, if it has one."""
        found = self._homes.get(key.ring)
        return None if found is None else found.endpoint

    def homes(self, endpoint: Endpoint) -> int:
        """Active prefixes whose home is `endpoint`."""
        self._expire()
        return self._count.get(endpoint, 0)

    def __len__(self) -> int:
        return len(self._homes)

    def _assign(self, candidates: Sequence[Endpoint], key: RoutingKey, exclude: Endpoint | None) -> int | None:
        if not candidates:
            return None
        active = sum(self._count.get(endpoint, 0) for endpoint in candidates)
        bound = math.ceil(self.load_factor * (active + 1) / len(candidates))
        first = None
        for position in self.rings.order(candidates, key):
            if first is None:
                first = position
            endpoint = candidates[position]
            if endpoint != exclude and self._count.get(endpoint, 0) + 1 <= bound:
                return position
        return first

    def _set(self, ring: int, endpoint: Endpoint, sent_at: float) -> None:
        old = self._homes.pop(ring, None)
        if old is not None:
            self._uncount(old.endpoint)
        self._homes[ring] = _Home(endpoint, sent_at)
        self._count[endpoint] = self._count.get(endpoint, 0) + 1
        while len(self._homes) > self.max_homes:
            _, dropped = self._homes.popitem(last=False)
            self._uncount(dropped.endpoint)

    def _uncount(self, endpoint: Endpoint) -> None:
        left = self._count[endpoint] - 1
        if left:
            self._count[endpoint] = left
        else:
            del self._count[endpoint]

    def _expire(self) -> None:
        horizon = self._clock() - self.idle_after
        while self._homes:
            ring, oldest = next(iter(self._homes.items()))
            if oldest.sent_at > horizon:
                return
            del self._homes[ring]
            self._uncount(oldest.endpoint)

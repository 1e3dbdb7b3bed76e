"""Which endpoint a request goes to: the strategies, the prefix index and ring they use, and the one a model's
Playground asks for.

Two strategies (`llmaz.apis.routing`), each a configuration of the one `scheduler.Scheduler` (filters, weighted
scorers, a picker; the rules below are theirs, `filters` and `scorers`):
- `least-outstanding` (`balancer.LeastOutstanding`): the fewest requests in flight through this replica.
- `prefix-aware` (`PrefixAware`): requests that share a prompt prefix go where that prefix was sent before, so
  the engine's prefix cache saves the prefill, without piling a hot prefix onto one engine:
  - the load of an endpoint is the larger of the engine's running + waiting requests (`LoadSignals`, when fresh)
    and this replica's own requests in flight to it. The engine's counts were read up to a scrape interval ago:
    requests that ended here since are taken off them (`InFlight.released_since`), or the next turn of a chat,
    sent the moment the previous one ends, would find its own engine still counting that previous turn and go
    elsewhere. Its utilisation is the engine's when it says (and nothing ended since), else load / bound;
  - homes by prefix footprint (`homes.PrefixHomes`): each endpoint has RING_POINTS points on a ring (stable
    hashes of "address:port#i"); a prefix (the request's ring key, `prefix.RoutingKey.ring`: its session, or its
    prompt's start) gets as its home the first endpoint of its ring walk that stays within a bound on active
    prefixes (CHWBL over prefixes, not requests), and keeps it while it is active. The candidates are scored home
    first, then in the ring's order from the key;
  - CHWBL over requests as the hard cap: an endpoint whose load would pass load + 1 <= ceil(load_factor x
    (total load + 1) / endpoints) is passed over (`filters.WithinBound`), unless its engine has a free slot, or
    it is the prefix's home with every slot busy and a queue short enough that a request there starts sooner
    than a recompute elsewhere (learned, `holds.PrefixHolds.queue_allowance`): sticky until saturated. The same
    conversation lands on its home while it has room, and spills to the next endpoint on the ring, always the same
    one, when it has not;
  - a prefix index: per endpoint, the block hashes this replica sent there (an LRU), recorded before each attempt
    (the scheduler's `pre_request`), and corrected after it when the engine's usage shows it evicted blocks the
    index holds (`post_response`, `scorers.PrefixMatch`); an endpoint's prefix match is the longest chain of the
    request's blocks it holds, over the request's blocks;
  - each endpoint within the bound (every endpoint when none is) is scored: prefix (its match) x the prefix
    weight + queue (1 - load / bound) x the queue weight + (1 - utilisation) x the utilisation weight, where an
    engine that says nothing of its utilisation counts load / bound. When no endpoint holds any of the prompt (a
    prefix this replica has not seen), the home counts as a full match: every replica then starts a prefix on the
    same engine. The highest score wins; ties go to ring order from the key. Load is scored against the bound, not
    against the least loaded endpoint, so one request more or less moves a score by a fraction: a prompt stays
    where most of it is cached until the bound moves it on, and the load scorers decide between endpoints that
    hold it equally;
  - a request without a prompt or session has no ring key: it is scored by queue and utilisation only, ties at
    random (least outstanding with the engines' load).

Invariants:
- A strategy never picks an excluded endpoint, and nothing awaits in `Scheduler.schedule`, so a decision and the
  `pre_request` (`InFlight.acquire`) after it see the same counts.
- Two schedulers (two gateway replicas) fed the same keyed requests in the same order with the same loads pick the
  same endpoints: hashes are stable, homes are given in the order prefixes arrive, ties follow the home and the
  ring, and nothing keyed depends on the random generator. Fed different orders, they converge on the homes the
  engines' cached tokens show (`homes.PrefixHomes.adopt`).
- Memory is bounded whatever the traffic: PREFIX_BLOCKS blocks per endpoint for at most PREFIX_ENDPOINTS
  endpoints, CACHED_RING_POINTS ring points (a candidate set's ring is built when the set is first seen and kept
  while the bound allows, not built per request), CACHED_PICKERS weight settings, `scorers.TRACKED_ATTEMPTS`
  attempts followed for the correction, `homes.DEFAULT_MAX_HOMES` prefix homes.
- Scheduling records nothing (`Scheduler.schedule`; homes idle past their time are dropped when read): an
  attempt's `pre_request` records the request's blocks for the endpoint it goes to, and a new prefix's home.
"""

from __future__ import annotations

import bisect
import random
import sys
from array import array
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from llmaz.apis.routing import PREFIX_AWARE, RoutingWeights, routing_override
from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.filters import DEFAULT_LOAD_FACTOR, HoldsAdapter, Untried, WithinBound
from llmaz.gateway.routing.holds import PrefixHolds
from llmaz.gateway.routing.homes import PrefixHomes
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals, LoadSignals
from llmaz.gateway.routing.prefix import RoutingKey, stable_hash
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import MaxScore, Request, Scheduler
from llmaz.gateway.routing.scorers import FreeCapacity, PrefixMatch, Queue

# Virtual points per endpoint: with 256 each, every endpoint's share of the ring is within a few percent of even.
RING_POINTS: Final = 256
# An endpoint's index: 8,192 blocks of 64 characters, about 130,000 tokens, the order of an engine's KV cache.
PREFIX_BLOCKS: Final = 8192
PREFIX_ENDPOINTS: Final = 128
# The least an endpoint's entry keeps after a correction: ~1,000 tokens, one prompt in one slot.
MIN_CAPACITY_BLOCKS: Final = 64
# Points of the rings kept built, over every candidate set (models, adapter holder sets, a model's set while its
# endpoints change): 12 bytes each, ~6 MiB, 2,048 endpoints' worth (e.g. 256 models of 8 endpoints).
CACHED_RING_POINTS: Final = 2048 * RING_POINTS
# A point and its owner's rank are sorted as one integer.
_RANK_BITS: Final = 32
_RANK_MASK: Final = (1 << _RANK_BITS) - 1
CACHED_PICKERS: Final = 32


class PrefixIndex:
    """Per endpoint, the block hashes recently sent there (an LRU of at most `blocks` each, `endpoints` endpoints).

    A request's blocks are recorded last block first, so its first blocks are the most recent: an entry is evicted
    only after every later block of its chain, and a held block i means blocks 0..i of its chain are held too. That
    makes the matched length monotone, found by bisection.

    Each entry keeps when it was recorded (`recorded_at`, a count of `record` calls that only grows), so an
    endpoint's entries are in the order of their stamps, oldest first. `forget_through` drops an endpoint's oldest
    entries, up to a stamp: the same cut the LRU makes when it is full, so the invariant above holds after it.

    An endpoint's entry is bounded by what its engine can hold, learned: a correction (`forget_through`) shows the
    engine keeps about what is left, so the entry keeps no more than that from then on (at least
    MIN_CAPACITY_BLOCKS); an answer with more cached than predicted (`grow`) raises it again, up to `blocks`.
    Otherwise the index would keep routing to prompts the engine evicted long ago, one miss at a time.
    """

    def __init__(self, blocks: int = PREFIX_BLOCKS, endpoints: int = PREFIX_ENDPOINTS) -> None:
        self.max_blocks = blocks
        self.max_endpoints = endpoints
        self._held: OrderedDict[Endpoint, OrderedDict[int, int]] = OrderedDict()
        self._capacity: dict[Endpoint, int] = {}
        self._stamp = 0

    def capacity(self, endpoint: Endpoint) -> int:
        """The blocks the endpoint's entry keeps at most: `max_blocks` until a correction showed the engine holds
        fewer (`forget_through`), growing back as answers show it holds more (`grow`)."""
        return self._capacity.get(endpoint, self.max_blocks)

    def grow(self, endpoint: Endpoint, blocks: int) -> None:
        """The engine showed `blocks` more cached than the entry predicted: it holds more than its capacity says."""
        capacity = self._capacity.get(endpoint)
        if capacity is None or blocks <= 0:
            return
        if capacity + blocks >= self.max_blocks:
            del self._capacity[endpoint]
        else:
            self._capacity[endpoint] = capacity + blocks

    def match(self, endpoint: Endpoint, blocks: Sequence[int]) -> int:
        """How many of `blocks`, from the first, the endpoint holds."""
        held = self._held.get(endpoint)
        if not held or not blocks or blocks[0] not in held:
            return 0
        low, high = 1, len(blocks)  # blocks[:low] held; the answer is in [low, high]
        while low < high:
            middle = (low + high + 1) // 2
            if blocks[middle - 1] in held:
                low = middle
            else:
                high = middle - 1
        return low

    def record(self, endpoint: Endpoint, blocks: Sequence[int]) -> None:
        held = self._held.get(endpoint)
        if held is None:
            held = self._held[endpoint] = OrderedDict()
            while len(self._held) > self.max_endpoints:
                self._held.popitem(last=False)
        else:
            self._held.move_to_end(endpoint)
        self._stamp += 1
        stamp = self._stamp  # one int object for every block of the call
        for block in reversed(blocks[: self.max_blocks]):
            held[block] = stamp
            held.move_to_end(block)
        capacity = self._capacity.get(endpoint, self.max_blocks)
        while len(held) > capacity:
            held.popitem(last=False)

    @property
    def stamp(self) -> int:
        """The stamp of the latest `record` call (0 before the first)."""
        return self._stamp

    def recorded_at(self, endpoint: Endpoint, block: int) -> int | None:
        """The stamp of the `record` call that last sent `block` to the endpoint; None when it does not hold it."""
        held = self._held.get(endpoint)
        return None if held is None else held.get(block)

    def forget_through(self, endpoint: Endpoint, stamp: int) -> int:
        """Forget every block the endpoint was last sent at or before `stamp` (its oldest entries); how many."""
        held = self._held.get(endpoint)
        forgotten = 0
        while held:
            block, recorded = next(iter(held.items()))
            if recorded > stamp:
                break
            del held[block]
            forgotten += 1
        if forgotten and held is not None:  # the engine holds what is left, not more: keep no more than that
            self._capacity[endpoint] = min(self.max_blocks, max(MIN_CAPACITY_BLOCKS, len(held)))
        return forgotten

    def forget(self, endpoint: Endpoint) -> None:
        self._held.pop(endpoint, None)
        self._capacity.pop(endpoint, None)

    def retain(self, endpoints: Collection[Endpoint]) -> None:
        """Drop every endpoint not in `endpoints` (those that left)."""
        for endpoint in [e for e in self._held if e not in endpoints]:
            del self._held[endpoint]
        for endpoint in [e for e in self._capacity if e not in endpoints]:
            del self._capacity[endpoint]

    def endpoints(self) -> list[Endpoint]:
        return list(self._held)

    def size(self) -> int:
        """Blocks held, over every endpoint."""
        return sum(len(held) for held in self._held.values())

    def footprint(self) -> int:
        """Bytes the index holds: its tables and their block hashes (for tests and the benchmark)."""
        tables = sys.getsizeof(self._held) + sum(sys.getsizeof(held) for held in self._held.values())
        blocks = sum(sys.getsizeof(block) for held in self._held.values() for block in held)
        distinct = {id(stamp): stamp for held in self._held.values() for stamp in held.values()}
        stamps = sum(sys.getsizeof(stamp) for stamp in distinct.values())
        return tables + blocks + stamps


def endpoint_points(endpoint: Endpoint, points: int = RING_POINTS) -> array[int]:
    """Where an endpoint's points are on every ring, sorted: stable hashes of "address:port#i"."""
    return array("Q", sorted(stable_hash(f"{endpoint}#{i}".encode()) for i in range(points)))


class Ring:
    """The consistent-hashing ring of a set of endpoints, RING_POINTS points each.

    Where an endpoint's points are depends only on its address and port, so every replica builds the same ring
    from the same endpoints, in whatever order they come (two endpoints on one point: the first by "address:port"
    owns it). `points_of` gives an endpoint's points (`endpoint_points`, or a cache of them).
    """

    def __init__(
        self, endpoints: Sequence[Endpoint], points_of: Callable[[Endpoint], array[int]] = endpoint_points
    ) -> None:
        self.endpoints = tuple(endpoints)
        # Each point as one integer, the point then its owner's rank by "address:port": one sort of plain ints.
        by_name = sorted(range(len(self.endpoints)), key=lambda index: str(self.endpoints[index]))
        placed: list[int] = []
        for rank, index in enumerate(by_name):
            placed.extend((point << _RANK_BITS) | rank for point in points_of(self.endpoints[index]))
        placed.sort()
        self._points = array("Q", (key >> _RANK_BITS for key in placed))
        self._owners = array("I", (by_name[key & _RANK_MASK] for key in placed))
        self._distinct = len(set(self.endpoints))

    @property
    def size(self) -> int:
        """Points on the ring."""
        return len(self._points)

    def walk_indices(self, key: int) -> Iterator[int]:
        """The index in `endpoints` of every distinct endpoint once, in ring order from `key`'s position."""
        distinct, size = self._distinct, len(self._points)
        if not distinct:
            return
        seen = [False] * len(self.endpoints)
        found = 0
        start = bisect.bisect_left(self._points, key)
        for step in range(size):
            owner = self._owners[(start + step) % size]
            if not seen[owner]:
                seen[owner] = True
                yield owner
                found += 1
                if found == distinct:
                    return

    def walk(self, key: int) -> Iterator[Endpoint]:
        """Every endpoint once, in ring order from `key`'s position."""
        return (self.endpoints[index] for index in self.walk_indices(key))


class Rings:
    """Rings by candidate list, built once per list and kept while they fit in `max_points` (least recently used
    go first; the last one built is always kept), so that a pick never builds a ring for a set of endpoints it has
    seen, however many models (and adapter holder sets) take turns. An endpoint's points are hashed once and kept
    while a kept ring has it, so a ring for a changed set (an endpoint more or less) only sorts. The prefix index
    keeps only endpoints of a kept ring."""

    def __init__(self, index: PrefixIndex, max_points: int = CACHED_RING_POINTS) -> None:
        self.index = index
        self._max_points = max_points
        self._rings: OrderedDict[tuple[Endpoint, ...], Ring] = OrderedDict()
        self._points: dict[Endpoint, array[int]] = {}
        self._kept_points = 0
        self.builds = 0
        """Rings built so far."""

    def of(self, candidates: Sequence[Endpoint]) -> Ring:
        key = tuple(candidates)
        ring = self._rings.get(key)
        if ring is not None:
            self._rings.move_to_end(key)
            return ring
        ring = self._rings[key] = Ring(key, self._points_of)
        self.builds += 1
        self._kept_points += ring.size
        while self._kept_points > self._max_points and len(self._rings) > 1:
            _, dropped = self._rings.popitem(last=False)
            self._kept_points -= dropped.size
        kept = {endpoint for kept in self._rings.values() for endpoint in kept.endpoints}
        self._points = {endpoint: points for endpoint, points in self._points.items() if endpoint in kept}
        self.index.retain(kept)
        return ring

    def order(self, candidates: Sequence[Endpoint], key: RoutingKey) -> Iterator[int]:
        """The positions of `candidates` in ring order from `key`'s ring key (`scheduler.Order`)."""
        return self.of(candidates).walk_indices(key.ring)

    def _points_of(self, endpoint: Endpoint) -> array[int]:
        points = self._points.get(endpoint)
        if points is None:
            points = self._points[endpoint] = endpoint_points(endpoint)
        return points


class PrefixAware(Scheduler):
    """The prefix-aware strategy (see the module docstring): a configuration of the Scheduler.

        filters:  HoldsAdapter, Untried, WithinBound(load_factor, PrefixHolds.queue_allowance)
        order:    the prefix's home, then the ring of the candidates (`Rings`) from the request's ring key
        hooks:    PrefixHomes (records a new prefix's home), PrefixHolds (attempts in flight per prefix)
        holds:    PrefixHolds (`Scheduler.decide`: for engines that reuse a prompt serially)
        scorers:  Queue x queue weight, FreeCapacity x utilisation weight, PrefixMatch x prefix weight
        picker:   MaxScore (ties: ring order; keyless, at random)

    The scores are summed in that order, so a total is the same float whatever the weights' history.
    """

    def __init__(
        self,
        in_flight: InFlight,
        signals: LoadSignals | None = None,
        weights: RoutingWeights | None = None,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        *,
        index: PrefixIndex | None = None,
        rings: Rings | None = None,
        rng: random.Random | None = None,
        adapters: AdapterSignals | None = None,
        prefix_match: PrefixMatch | None = None,
        homes: PrefixHomes | None = None,
        prefix_holds: PrefixHolds | None = None,
        corrected: Callable[[str], None] | None = None,
        held: Callable[[str, str, str, float], None] | None = None,
    ) -> None:
        """`index`, `rings`, `homes`, `prefix_holds` and `prefix_match` may be shared by schedulers of different
        weights: they learn from the same traffic. `corrected(model)` is called each time the engine's usage
        corrects the index (`scorers.PrefixMatch`); `held(model, where, outcome, seconds)` after each wait of a
        request behind its prefix (`holds.PrefixHolds`)."""
        self.weights = weights or RoutingWeights()
        self.load_factor = load_factor
        self.index = index or PrefixIndex()
        self.rings = rings or Rings(self.index)
        self.homes = PrefixHomes(self.rings) if homes is None else homes
        self.prefix_holds = (
            PrefixHolds(home_of=self.homes.home_of, waited=held) if prefix_holds is None else prefix_holds
        )
        self.prefix_match = prefix_match or PrefixMatch(self.index, corrected, self._found)
        self._rng = rng or random.Random()
        self._adapters = adapters
        super().__init__(
            PREFIX_AWARE,
            in_flight,
            filters=[HoldsAdapter(adapters), Untried(), WithinBound(load_factor, self.prefix_holds.queue_allowance)],
            scorers=[
                (Queue(), self.weights.queue),
                (FreeCapacity(), self.weights.utilisation),
                (self.prefix_match, self.weights.prefix),
            ],
            picker=MaxScore(self._rng),
            signals=signals,
            order=self.homes,
            hooks=[self.homes, self.prefix_holds],
            holds=self.prefix_holds,
        )

    def _found(self, request: Request, endpoint: Endpoint) -> None:
        if request.key is not None:
            self.homes.adopt(request.key, endpoint)

    def with_weights(self, weights: RoutingWeights) -> PrefixAware:
        """A scheduler of other weights on the same index, rings and counts."""
        return PrefixAware(
            self.in_flight,
            self.signals,
            weights,
            self.load_factor,
            index=self.index,
            rings=self.rings,
            rng=self._rng,
            adapters=self._adapters,
            prefix_match=self.prefix_match,
            homes=self.homes,
            prefix_holds=self.prefix_holds,
        )


@dataclass(frozen=True, slots=True)
class RoutingOptions:
    strategy: str = PREFIX_AWARE
    """The gateway's strategy (`llmaz.apis.routing.STRATEGIES`); a Playground may name another. Default
    prefix-aware."""
    weights: RoutingWeights = field(default_factory=RoutingWeights)
    """The prefix-aware scorers' weights; a Playground may name others. Default prefix 3, queue 2, utilisation 2."""
    load_factor: float = DEFAULT_LOAD_FACTOR
    """CHWBL's bound on an endpoint's load over the average (at least 1). Default 1.25."""


class Pickers:
    """The schedulers of one gateway replica, one per strategy and weights, and which one a model's Playgrounds ask
    for.

    The strategy and weights are the first of the model's Playgrounds (by namespace and name) that carries a routing
    annotation, else the gateway's options; an annotation the rules of `llmaz.apis.routing` refuse is ignored
    (admission denies it; only an object stored without admission can have one). Every prefix-aware scheduler shares
    one prefix index and one set of rings.
    """

    def __init__(
        self,
        in_flight: InFlight,
        signals: LoadSignals | None = None,
        options: RoutingOptions | None = None,
        rng: random.Random | None = None,
        adapters: AdapterSignals | None = None,
        corrected: Callable[[str], None] | None = None,
        held: Callable[[str, str, str, float], None] | None = None,
    ) -> None:
        """`adapters`: which endpoints hold which LoRA adapters (not given: every endpoint holds them all);
        `corrected(model)`: called each time an engine's usage corrects the prefix index; `held(model, where,
        outcome, seconds)`: after each wait behind a prefix (metrics)."""
        self.options = opts = options or RoutingOptions()
        self.holds_adapter = HoldsAdapter(adapters)
        """The adapter filter's rule, for a caller that waits for an endpoint holding the request's adapter."""
        self.least_outstanding = LeastOutstanding(in_flight, rng, adapters)
        self.prefix_aware = PrefixAware(
            in_flight,
            signals,
            opts.weights,
            opts.load_factor,
            rng=rng,
            adapters=adapters,
            corrected=corrected,
            held=held,
        )
        self._weighted: OrderedDict[RoutingWeights, PrefixAware] = OrderedDict()

    def strategy(self, name: str, weights: RoutingWeights | None = None) -> Scheduler:
        if name != PREFIX_AWARE:
            return self.least_outstanding
        if weights is None or weights == self.prefix_aware.weights:
            return self.prefix_aware
        picker = self._weighted.get(weights)
        if picker is None:
            picker = self._weighted[weights] = self.prefix_aware.with_weights(weights)
            while len(self._weighted) > CACHED_PICKERS:
                self._weighted.popitem(last=False)
        else:
            self._weighted.move_to_end(weights)
        return picker

    def for_playgrounds(self, playgrounds: Iterable[Mapping[str, Any]]) -> Scheduler:
        """The scheduler for a model served by `playgrounds` (see the class docstring)."""
        for playground in sorted(playgrounds, key=_namespaced_name):
            try:
                override = routing_override(playground)
            except ValueError:
                continue
            if override is not None:
                weights = override.weights_over(self.options.weights)
                return self.strategy(override.strategy or self.options.strategy, weights)
        return self.strategy(self.options.strategy)


def _namespaced_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")

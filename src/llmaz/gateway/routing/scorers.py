"""The scheduler's scorers: each rates every candidate from 0 to 1 by one measure (`scheduler.Scorer`).

- `FewestInFlight` (balance): 1 / (1 + this replica's requests in flight to the endpoint); the fewest score highest
  and equal counts score equal. The least-outstanding strategy's one scorer.
- `Queue` (balance): 1 - load / bound, at least 0; load is the engine's running + waiting or this replica's own,
  the larger (`scheduler.Load`), against the cycle's CHWBL bound (`filters.WithinBound`; without one, the largest
  load + 1). Scored against the bound, not the least loaded, one request more moves a score by a fraction.
- `FreeCapacity` (balance): 1 - the engine's utilisation (KV-cache use, busy slots), clamped to [0, 1]; an engine
  that does not say counts load / bound.
- `PrefixMatch` (affinity): the longest chain of the request's blocks the endpoint was sent (`PrefixIndex`), over
  the request's blocks; 0 without a key. When no candidate holds any of them (a prefix new here), the first in
  the cycle's order (the home: the first on the ring within the bound) counts as a full match, so every gateway
  replica starts a prefix on the same engine. It records the request's blocks for the endpoint before each
  attempt (`pre_request`).

A scorer changes no state; only its hooks do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import AFFINITY, BALANCE, Cycle, PromptUsage, Request, Scorer


class FewestInFlight(Scorer):
    name = "fewest-in-flight"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        return [1.0 / (1 + cycle.outstanding(i)) for i in positions]


def _bound(cycle: Cycle, positions: list[int]) -> int:
    return cycle.bound if cycle.bound is not None else 1 + max(cycle.load(i).requests for i in positions)


class Queue(Scorer):
    name = "queue"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        bound = _bound(cycle, positions)
        return [max(0.0, 1.0 - cycle.load(i).requests / bound) for i in positions]


class FreeCapacity(Scorer):
    name = "free-capacity"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        bound = _bound(cycle, positions)
        scores = []
        for i in positions:
            load = cycle.load(i)
            used = load.utilisation if load.utilisation is not None else load.requests / bound
            scores.append(1.0 - min(1.0, max(0.0, used)))
        return scores


class BlockIndex(Protocol):
    """Per endpoint, the prompt blocks sent there (`picker.PrefixIndex`)."""

    def match(self, endpoint: Endpoint, blocks: Sequence[int]) -> int: ...

    def record(self, endpoint: Endpoint, blocks: Sequence[int]) -> None: ...


class PrefixMatch(Scorer):
    name = "prefix-match"
    category = AFFINITY
    needs_key = True

    def __init__(self, index: BlockIndex) -> None:
        self.index = index

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        key = cycle.request.key
        if key is None or not positions:
            return [0.0] * len(positions)
        blocks = key.blocks
        matches = [self.index.match(cycle.candidates[i], blocks) / len(blocks) if blocks else 0.0 for i in positions]
        if not any(matches):  # a prefix new here: the home (the first in order) starts it
            matches[0] = 1.0
        return matches

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        if request.key is not None:
            self.index.record(endpoint, request.key.blocks)

    def post_response(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None) -> None:
        # The engine's cached tokens could correct the index (a prefix it evicted); nothing uses them yet.
        pass

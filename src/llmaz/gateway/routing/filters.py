"""The scheduler's filters: each narrows a request's candidates by one rule (`scheduler.Filter`).

- `HoldsAdapter`: a request naming a LoRA adapter goes only to endpoints whose engine lists it, or whose listing is
  not known (`load.AdapterSignals`; every replica starts with its model's adapters).
- `Untried`: an endpoint the request already tried (a retry) is never picked again.
- `WithinBound`: CHWBL's bound. An endpoint is within it while load + 1 <= ceil(load_factor x (total load + 1) /
  endpoints), over the candidates it is given, or while its engine has a free slot (load + 1 <= the slots it
  says it has, `scheduler.Load.room`): a request there is served at once, so a prefix stays on its engine until
  the engine is full, not until it carries more than the average. Past its slots, the home of the request's prefix
  stays within while the request would wait there less than recomputing its prompt elsewhere costs
  (`queue_allowance`, learned from the engines' timings, `holds.PrefixHolds.queue_allowance`): sticky until
  saturated. When none is within, every one stays (the least bad is still picked). It leaves the bound in the
  cycle for the scorers that score load against it.

A filter keeps the candidates' order and changes no state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

from llmaz.gateway.routing.adapters import Adapter
from llmaz.gateway.routing.load import AdapterSignals, NoSignals
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import Cycle, Filter, Request

DEFAULT_LOAD_FACTOR: Final = 1.25


class HoldsAdapter(Filter):
    name = "holds-adapter"
    empty_reason = "no endpoint holds the adapter"

    def __init__(self, signals: AdapterSignals | None = None) -> None:
        self.signals: AdapterSignals = signals or NoSignals()

    def holds(self, adapter: Adapter, endpoint: Endpoint) -> bool:
        listing = self.signals.adapters(endpoint)
        return listing is None or listing.holds(adapter)

    def holders(self, adapter: Adapter, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """The endpoints holding `adapter` (what a caller waits on before it schedules)."""
        return [endpoint for endpoint in endpoints if self.holds(adapter, endpoint)]

    def filter(self, cycle: Cycle, positions: list[int]) -> list[int]:
        adapter = cycle.request.adapter
        if adapter is None:
            return positions
        return [i for i in positions if self.holds(adapter, cycle.candidates[i])]


class Untried(Filter):
    name = "untried"
    empty_reason = "every endpoint has been tried"

    def filter(self, cycle: Cycle, positions: list[int]) -> list[int]:
        excluded = cycle.request.excluded
        if not excluded:
            return positions
        return [i for i in positions if cycle.candidates[i] not in excluded]


class WithinBound(Filter):
    name = "within-bound"

    def __init__(
        self,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        queue_allowance: Callable[[Request, Endpoint, int], int] | None = None,
    ) -> None:
        """`queue_allowance(request, endpoint, slots)`: the requests that may wait at the endpoint, a full engine of
        `slots` slots (none when not given)."""
        if not load_factor >= 1:
            raise ValueError(f"the load factor must be at least 1, got {load_factor}")
        self.load_factor = load_factor
        self.queue_allowance = queue_allowance

    def filter(self, cycle: Cycle, positions: list[int]) -> list[int]:
        total = sum(cycle.load(i).requests for i in positions)
        bound = cycle.bound = math.ceil(self.load_factor * (total + 1) / len(positions))
        return [i for i in positions if self._within(cycle, i, bound)] or positions

    def _within(self, cycle: Cycle, position: int, bound: int) -> bool:
        load = cycle.load(position)
        if load.requests + 1 <= load.room(bound):
            return True
        if load.slots is None or self.queue_allowance is None:
            return False
        # Asked only of an endpoint over its room (its slots all busy): the queue allowance is the exception.
        return load.requests + 1 <= load.slots + self.queue_allowance(
            cycle.request, cycle.candidates[position], load.slots
        )

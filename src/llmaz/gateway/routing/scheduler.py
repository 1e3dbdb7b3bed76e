"""The one way an endpoint is chosen for a request: a scheduling cycle of filters, weighted scorers and a picker.

    Request -> filters -> [ring order] -> scorers x weights -> picker -> Decision (the pick, then fallbacks)
    pre_request(request, endpoint)          before each attempt: counted in flight, plugins record it
    post_response(request, endpoint, usage) after each attempt, however it ended: released, plugins hear how it went
    decide(request, engine_of)              a request's first schedule: for a pick whose engine reuses prompts
                                            serially, waits while that endpoint serves the request's prefix, or
                                            for a slot at the prefix's full home (`holds`), then schedules again
                                            (at most MAX_HOLDS waits)

The strategies (`llmaz.apis.routing`) are configurations of this one Scheduler, lists of plugins and weights:
`balancer.LeastOutstanding` and `picker.PrefixAware`. The plugins are `filters` (narrow the candidates) and
`scorers` (a value in [0, 1] per candidate, each of a declared category, AFFINITY or BALANCE). What they read of
an endpoint's load is gathered once per cycle by the `Cycle` (the data), apart from what they decide.

The gateway's proxy calls `decide` for a request's first attempt and `schedule` for each retry, the endpoints it
has tried excluded, then `pre_request`, and `post_response` when the attempt ends. An Endpoint Picker behind Envoy
(ext_proc) calls `decide` once and hands Envoy the pick and its fallbacks (docs/design/scheduler.md).

Contracts:
- `schedule` decides only: it changes no state, and nothing in it awaits, so a decision and the `pre_request`
  after it see the same counts. Only `pre_request` and `post_response` change state.
- A decision never holds an endpoint the request excluded, or one the filters removed; it is empty, with a reason,
  when none is left.
- Candidates are worked on as positions in the request's list (an Endpoint's hash is a Python call).
- Scores are summed in the configured order, weight x value, from 0.0; the picker takes the highest total. With a
  ring (`Order`) and a routing key, the candidates are in ring order from the key and ties go to the earlier;
  otherwise ties are broken at random (the generator is injectable) and fallbacks of equal totals keep the
  candidates' order.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from llmaz.gateway.routing import engines
from llmaz.gateway.routing.adapters import Adapter
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import LoadSignals, NoSignals
from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint

AFFINITY: Final = "affinity"
"""A scorer that prefers where the request, or its like, went before (its prefix, its session)."""
BALANCE: Final = "balance"
"""A scorer that prefers the less loaded."""
MAX_HOLDS: Final = 2
"""How many times `decide` lets a request wait: for a slot at its home, then behind its prefix there."""


@dataclass(frozen=True, slots=True)
class Request:
    """What the scheduler knows of one request."""

    model: str
    """The served model routed to (an adapter's base model)."""
    candidates: Sequence[Endpoint]
    """The model's ready endpoints, or the subset the caller narrowed them to (those holding the adapter)."""
    key: RoutingKey | None = None
    """The request's routing key (`prefix.routing_key`); None when it has no prompt or the strategy reads none."""
    adapter: Adapter | None = None
    """The LoRA adapter the request names, if any."""
    session: str | None = None
    """The session the client names (header `x-session-id`, else the body's `user`), if any."""
    excluded: frozenset[Endpoint] = frozenset()
    """Endpoints already tried for this request: never picked again."""

    def excluding(self, endpoints: Collection[Endpoint]) -> Request:
        return dataclasses.replace(self, excluded=frozenset(endpoints))


@dataclass(frozen=True, slots=True)
class Decision:
    endpoints: tuple[Endpoint, ...]
    """The pick first, then the fallbacks, best first."""
    reason: str | None = None
    """Why there is no endpoint, when there is none."""
    predicted_cached_tokens: int | None = None
    """The prompt tokens the pick is expected to find in its prefix cache, when a scorer predicts it (for traces)."""
    held: bool = False
    """The request waited behind another attempt of its prefix before this decision (`Scheduler.decide`)."""

    @property
    def endpoint(self) -> Endpoint | None:
        return self.endpoints[0] if self.endpoints else None


@dataclass(frozen=True, slots=True)
class PromptUsage:
    """What the engine reported of a request's prompt, when it did."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    """The prompt tokens the engine found in its prefix cache (`usage.prompt_tokens_details.cached_tokens`)."""


@dataclass(frozen=True, slots=True)
class Load:
    requests: int
    """The larger of the engine's running + waiting (less what ended here since it was read) and this replica's
    own requests in flight to the endpoint."""
    utilisation: float | None
    """The engine's own, 0 to 1, when it says and nothing ended here since; else None."""
    slots: int | None = None
    """How many requests the engine serves at once, when it says (`load.EngineLoad.slots`)."""

    def room(self, bound: int) -> int:
        """The load the endpoint may carry: the CHWBL `bound`, or its engine's slots when that is more (an engine
        with a free slot serves a request at once, so a prefix stays on its engine until that is full)."""
        return bound if self.slots is None else max(bound, self.slots)


class Cycle:
    """One request's scheduling: the request and what is known of its candidates, each read once, on demand.

    Filters may leave facts for the scorers (`bound`)."""

    def __init__(self, request: Request, in_flight: InFlight, signals: LoadSignals) -> None:
        self.request = request
        self.candidates = request.candidates
        self.in_flight = in_flight
        self.signals = signals
        self.bound: int | None = None
        """The CHWBL bound on an endpoint's load, when a filter set it (`filters.WithinBound`)."""
        self._loads: dict[int, Load] = {}

    def outstanding(self, position: int) -> int:
        """This replica's requests in flight to the candidate at `position`."""
        return self.in_flight.outstanding(self.candidates[position])

    def load(self, position: int) -> Load:
        found = self._loads.get(position)
        if found is None:
            found = self._loads[position] = self.read_load(self.candidates[position])
        return found

    def read_load(self, endpoint: Endpoint) -> Load:
        """The endpoint's load now, read afresh (`load` reads a candidate's once per cycle)."""
        own = self.in_flight.outstanding(endpoint)
        engine = self.signals.load(endpoint)
        if engine is None:
            return Load(own, None)
        # The engine was asked a moment ago: what ended here since may still be in its counts.
        ended = 0 if engine.observed_at is None else self.in_flight.released_since(endpoint, engine.observed_at)
        return Load(max(engine.requests - ended, own), engine.utilisation if not ended else None, engine.slots)


class Plugin:
    """A filter or scorer; the hooks are called for every attempt (nothing by default)."""

    name = "plugin"

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        """The request is about to be sent to `endpoint`."""

    def post_response(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None) -> None:
        """The attempt to `endpoint` ended; `usage` when the engine reported it."""


class Filter(Plugin):
    empty_reason = "no endpoint is left"
    """The decision's reason when this filter leaves no candidate."""

    def filter(self, cycle: Cycle, positions: list[int]) -> list[int]:
        """The positions, in their order, of the candidates the request may go to."""
        raise NotImplementedError


class Scorer(Plugin):
    category: str = BALANCE
    needs_key = False
    """Whether it reads the request's routing key (the caller computes one only then)."""

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        """A value in [0, 1] for each position, in their order; higher is better."""
        raise NotImplementedError


class Holds(Protocol):
    """What holds a request behind another attempt of its prefix (`holds.PrefixHolds`)."""

    async def wait(self, request: Request, endpoint: Endpoint, sharing: int = 0) -> bool:
        """Wait while the pick, `endpoint`, serving `sharing` requests, is worth waiting for; whether it waited."""
        ...


class Picker(Protocol):
    def rank(self, positions: list[int], totals: list[float], ordered: bool) -> list[int]:
        """`positions` best first by `totals`; `ordered`: ties go to the earlier (else as the picker breaks them)."""
        ...


class Order(Protocol):
    def order(self, candidates: Sequence[Endpoint], key: RoutingKey) -> Iterable[int]:
        """Every position of `candidates` once, in the order of `key` (`homes.PrefixHomes`: the prefix's home, then
        the ring's order from the key)."""
        ...


class MaxScore:
    """The highest total wins; ties go to the earlier when the candidates are ordered, else at random."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def rank(self, positions: list[int], totals: list[float], ordered: bool) -> list[int]:
        ranked = sorted(range(len(positions)), key=lambda k: -totals[k])  # stable: equal totals keep their order
        if not ordered:
            best = totals[ranked[0]]
            tied = [k for k in range(len(positions)) if totals[k] == best]
            if len(tied) > 1:
                chosen = self._rng.choice(tied)
                ranked.remove(chosen)
                ranked.insert(0, chosen)
        return [positions[k] for k in ranked]


class Scheduler:
    """One configuration of the cycle (see the module docstring)."""

    def __init__(
        self,
        strategy: str,
        in_flight: InFlight,
        *,
        filters: Sequence[Filter],
        scorers: Sequence[tuple[Scorer, float]],
        picker: Picker,
        signals: LoadSignals | None = None,
        order: Order | None = None,
        hooks: Sequence[Plugin] = (),
        holds: Holds | None = None,
    ) -> None:
        """`scorers` are (scorer, weight) pairs, summed in this order; `order`: the order keyed requests' candidates
        are scored in; `hooks`: other plugins told of every attempt (after the filters and scorers); `holds`: what
        `decide` waits on."""
        self.strategy = strategy
        self.in_flight = in_flight
        self.signals: LoadSignals = signals or NoSignals()
        self.filters = tuple(filters)
        self.scorers = tuple(scorers)
        self.picker = picker
        self.order = order
        self.holds = holds
        self.needs_key = order is not None or any(scorer.needs_key for scorer, _ in self.scorers)
        self._plugins: tuple[Plugin, ...] = (*self.filters, *(scorer for scorer, _ in self.scorers), *hooks)

    def schedule(self, request: Request) -> Decision:
        """Where `request` goes: the pick, then the fallbacks; no endpoint, and why, when none is left."""
        if not request.candidates:
            return Decision((), "the model has no ready endpoint")
        cycle = Cycle(request, self.in_flight, self.signals)
        positions = list(range(len(request.candidates)))
        for step in self.filters:
            positions = step.filter(cycle, positions)
            if not positions:
                return Decision((), step.empty_reason)
        ordered = False
        if self.order is not None and request.key is not None:  # ties follow the ring; the first is the home
            allowed = set(positions)
            positions = [i for i in self.order.order(request.candidates, request.key) if i in allowed]
            ordered = True
        totals = [0.0] * len(positions)
        for scorer, weight in self.scorers:
            for k, value in enumerate(scorer.score(cycle, positions)):
                totals[k] += weight * value
        ranked = self.picker.rank(positions, totals, ordered)
        return Decision(tuple(request.candidates[i] for i in ranked))

    async def decide(self, request: Request, engine_of: Callable[[Endpoint], engines.Engine]) -> Decision:
        """`schedule`, for a request's first attempt. When the pick's engine (`engine_of`) reuses a cached prompt
        serially (`engines.PromptReuse.SERIAL`) and the pick serves another attempt of the request's prefix, or the
        request was moved off its prefix's full home, the request waits until an attempt there ends, at most what
        recomputing costs there (`holds`: for the request and the requests the pick serves, whose batch a recompute
        joins), and is scheduled again: at most MAX_HOLDS times, so a request that waited for a slot at its home
        and finds its prefix still served there waits for that attempt too. Without `holds` nothing waits."""
        decision = self.schedule(request)
        held = False
        for _ in range(MAX_HOLDS):
            endpoint = decision.endpoint
            if (
                self.holds is None
                or endpoint is None
                or engine_of(endpoint).prompt_reuse is not engines.PromptReuse.SERIAL
            ):
                break
            sharing = Cycle(request, self.in_flight, self.signals).read_load(endpoint).requests
            if not await self.holds.wait(request, endpoint, sharing):
                break
            held = True
            decision = self.schedule(request)
        return dataclasses.replace(decision, held=True) if held else decision

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        """Before an attempt to `endpoint`: it counts in flight, and the plugins record it."""
        self.in_flight.acquire(endpoint)
        for plugin in self._plugins:
            plugin.pre_request(request, endpoint)

    def post_response(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None = None) -> None:
        """After an attempt to `endpoint`, however it ended: it no longer counts in flight; the plugins hear it."""
        self.in_flight.release(endpoint)
        for plugin in self._plugins:
            plugin.post_response(request, endpoint, usage)

    def pick(
        self, candidates: Sequence[Endpoint], exclude: Collection[Endpoint] = (), key: RoutingKey | None = None
    ) -> Endpoint | None:
        """The pick for a request of `key`, recorded by the plugins as sent there but not counted in flight: for a
        caller that keeps the in-flight count itself (the tests and the benchmark, which replay traffic)."""
        request = Request("", candidates, key, excluded=frozenset(exclude))
        endpoint = self.schedule(request).endpoint
        if endpoint is not None:
            for plugin in self._plugins:
                plugin.pre_request(request, endpoint)
        return endpoint

"""The scheduling cycle: each filter and scorer by its rule, the decision (the pick, fallbacks, a reason when none),
the hooks around an attempt, the two strategies as configurations of one Scheduler, and the proxy calling it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from llmaz.apis.routing import LEAST_OUTSTANDING, PREFIX_AWARE, RoutingWeights
from llmaz.gateway.routing.adapters import Adapter, EngineAdapters, ServedAdapters
from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.engines import engine
from llmaz.gateway.routing.filters import HoldsAdapter, Untried, WithinBound
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.picker import PrefixAware, PrefixIndex, Ring
from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import (
    AFFINITY,
    BALANCE,
    Cycle,
    Decision,
    MaxScore,
    PromptUsage,
    Request,
    Scheduler,
    Scorer,
)
from llmaz.gateway.routing.scorers import FewestInFlight, FreeCapacity, PrefixMatch, Queue

from .support import LEAST_OUTSTANDING_GATEWAY, Cluster, engines, refused_endpoint, running_gateway

A, B, C, D = (Endpoint(f"10.2.0.{i}", 8000) for i in range(1, 5))
ADAPTER = Adapter("sql", "m", 0)


@dataclass
class Signals:
    loads: dict[Endpoint, EngineLoad] = field(default_factory=dict)
    listings: dict[Endpoint, EngineAdapters] = field(default_factory=dict)

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return self.loads.get(endpoint)

    def adapters(self, endpoint: Endpoint) -> EngineAdapters | None:
        return self.listings.get(endpoint)

    def engine(self, endpoint: Endpoint) -> str | None:
        return None


def cycle(
    candidates: Sequence[Endpoint],
    *,
    loads: dict[Endpoint, EngineLoad] | None = None,
    in_flight: dict[Endpoint, int] | None = None,
    **request: object,
) -> Cycle:
    counts = InFlight()
    for endpoint, n in (in_flight or {}).items():
        for _ in range(n):
            counts.acquire(endpoint)
    return Cycle(Request("m", candidates, **request), counts, Signals(loads or {}))  # type: ignore[arg-type]


def everyone(candidates: Sequence[Endpoint]) -> list[int]:
    return list(range(len(candidates)))


# Filters


@pytest.mark.parametrize(
    ("excluded", "left"),
    [(set(), [A, B, C]), ({B}, [A, C]), ({A, C}, [B]), ({A, B, C}, []), ({D}, [A, B, C])],
)
def test_untried_drops_the_endpoints_the_request_already_tried(excluded: set[Endpoint], left: list[Endpoint]) -> None:
    state = cycle([A, B, C], excluded=frozenset(excluded))
    assert [state.candidates[i] for i in Untried().filter(state, everyone([A, B, C]))] == left


@pytest.mark.parametrize(
    ("adapter", "listings", "left"),
    [
        (None, {A: ServedAdapters(frozenset())}, [A, B, C]),  # no adapter named: every endpoint
        (ADAPTER, {}, [A, B, C]),  # no listing known: every replica starts with its adapters
        (ADAPTER, {A: ServedAdapters(frozenset({"sql"})), B: ServedAdapters(frozenset({"chat"}))}, [A, C]),
        (ADAPTER, {e: ServedAdapters(frozenset()) for e in (A, B, C)}, []),
    ],
)
def test_holds_adapter_keeps_the_endpoints_that_list_the_adapter_or_say_nothing(
    adapter: Adapter | None, listings: dict[Endpoint, EngineAdapters], left: list[Endpoint]
) -> None:
    holds = HoldsAdapter(Signals(listings=listings))
    state = cycle([A, B, C], adapter=adapter)
    assert [state.candidates[i] for i in holds.filter(state, everyone([A, B, C]))] == left
    if adapter is not None:
        assert holds.holders(adapter, [A, B, C]) == left


@pytest.mark.parametrize(
    ("in_flight", "load_factor", "bound", "left"),
    [
        ({}, 1.25, 1, [A, B, C, D]),  # ceil(1.25 x 1 / 4) = 1: every idle endpoint has room for one
        ({A: 1}, 1.25, 1, [B, C, D]),  # ceil(1.25 x 2 / 4) = 1
        ({A: 4, B: 2}, 1.0, 2, [C, D]),  # ceil(7 / 4) = 2: 2 + 1 > 2
        ({A: 4, B: 2}, 2.0, 4, [B, C, D]),  # ceil(14 / 4) = 4
        ({A: 1, B: 1, C: 1, D: 1}, 1.0, 2, [A, B, C, D]),
    ],
)
def test_within_bound_keeps_the_endpoints_with_room_under_the_chwbl_bound_and_leaves_the_bound(
    in_flight: dict[Endpoint, int], load_factor: float, bound: int, left: list[Endpoint]
) -> None:
    state = cycle([A, B, C, D], in_flight=in_flight)
    kept = WithinBound(load_factor).filter(state, everyone([A, B, C, D]))
    assert [state.candidates[i] for i in kept] == left
    assert state.bound == bound


def test_within_bound_counts_the_engines_own_load() -> None:
    state = cycle([A, B], loads={A: EngineLoad(4, 2)}, in_flight={A: 1, B: 1})
    assert WithinBound(1.0).filter(state, [0, 1]) == [1]  # ceil((6 + 1 + 1) / 2) = 4: A's 6 + 1 is over it
    assert state.bound == 4


@pytest.mark.parametrize(
    ("loads", "allowance", "left"),
    [
        ({A: EngineLoad(2, 0, slots=2)}, 0, [B, C, D]),  # every slot busy and no queue allowed: over its room
        ({A: EngineLoad(2, 0, slots=2)}, 1, [A, B, C, D]),  # one may wait there: A stays a candidate
        ({A: EngineLoad(2, 1, slots=2)}, 1, [B, C, D]),  # one already waits: past it
        ({A: EngineLoad(2, 0)}, 1, [B, C, D]),  # an engine that does not say its slots gets no queue
    ],
)
def test_within_bound_keeps_a_full_engine_while_its_queue_is_within_the_learned_allowance(
    loads: dict[Endpoint, EngineLoad], allowance: int, left: list[Endpoint]
) -> None:
    asked: list[tuple[str, Endpoint, int]] = []

    def queue_allowance(request: Request, endpoint: Endpoint, slots: int) -> int:
        asked.append((request.model, endpoint, slots))
        return allowance

    state = cycle([A, B, C, D], loads=loads)
    kept = WithinBound(1.25, queue_allowance).filter(state, everyone([A, B, C, D]))
    assert state.bound in (1, 2)  # under the slots: they, not the bound, give A its room
    assert [state.candidates[i] for i in kept] == left
    assert set(asked) <= {("m", A, 2)}


def test_a_load_factor_below_one_is_refused_naming_the_minimum() -> None:
    with pytest.raises(ValueError, match=r"at least 1, got 0\.5"):
        WithinBound(0.5)


# Scorers


@pytest.mark.parametrize(
    ("in_flight", "scores"),
    [({}, [1.0, 1.0, 1.0]), ({A: 1, B: 3}, [0.5, 0.25, 1.0]), ({A: 2, B: 2, C: 2}, [1 / 3] * 3)],
)
def test_fewest_in_flight_scores_the_endpoints_with_fewer_requests_here_higher(
    in_flight: dict[Endpoint, int], scores: list[float]
) -> None:
    assert FewestInFlight().score(cycle([A, B, C], in_flight=in_flight), [0, 1, 2]) == pytest.approx(scores)


@pytest.mark.parametrize(
    ("loads", "in_flight", "bound", "scores"),
    [
        ({}, {A: 1, B: 2}, 4, [0.75, 0.5]),  # no engine load known: this replica's own counts
        ({A: EngineLoad(2, 1), B: EngineLoad(0, 0)}, {B: 1}, 4, [0.25, 0.75]),  # the larger of both
        ({A: EngineLoad(8, 0)}, {}, 4, [0.0, 1.0]),  # over the bound: 0, never below
        ({A: EngineLoad(3, 0)}, {}, None, [0.25, 1.0]),  # no bound set: the largest load + 1
    ],
)
def test_queue_scores_load_against_the_bound(
    loads: dict[Endpoint, EngineLoad], in_flight: dict[Endpoint, int], bound: int | None, scores: list[float]
) -> None:
    state = cycle([A, B], loads=loads, in_flight=in_flight)
    state.bound = bound
    assert Queue().score(state, [0, 1]) == pytest.approx(scores)


@pytest.mark.parametrize(
    ("load", "in_flight", "score"),
    [
        (EngineLoad(1, 0, 0.3), 0, 0.7),  # the engine's utilisation
        (EngineLoad(1, 0, 1.4), 0, 0.0),  # clamped
        (EngineLoad(1, 0, -0.2), 0, 1.0),
        (EngineLoad(2, 0, None), 0, 0.5),  # not said: load / bound
        (None, 1, 0.75),  # no engine load: this replica's count / bound
        (EngineLoad(2, 0, 1.0, slots=2), 0, 1.0),  # busy slots are the queue's: not counted twice
    ],
)
def test_free_capacity_scores_what_the_engine_has_left(load: EngineLoad | None, in_flight: int, score: float) -> None:
    state = cycle([A], loads={A: load} if load else {}, in_flight={A: in_flight})
    state.bound = 4
    assert FreeCapacity().score(state, [0]) == pytest.approx([score])


def test_free_capacity_ignores_the_engines_utilisation_once_a_request_ended_here_since_it_was_read() -> None:
    now = [50.0]
    counts = InFlight(clock=lambda: now[0])
    counts.acquire(A)
    counts.release(A)  # ended at 50, after the engine was read at 49
    state = Cycle(Request("m", [A]), counts, Signals({A: EngineLoad(2, 0, 0.9, observed_at=49.0)}))
    state.bound = 4
    assert FreeCapacity().score(state, [0]) == [0.75]  # (2 - 1) / 4 used, not the engine's 0.9
    assert Queue().score(state, [0]) == [0.75]


@pytest.mark.parametrize(
    ("held", "blocks", "scores"),
    [
        ({A: (1, 2, 3, 4), B: (1, 2)}, (1, 2, 3, 4), [1.0, 0.5, 0.0]),
        ({B: (1, 2, 9)}, (1, 2, 3, 4), [0.0, 0.5, 0.0]),
        ({}, (1, 2, 3), [1.0, 0.0, 0.0]),  # held nowhere: the first in order (the home) counts as a full match
        ({A: (5,)}, (), [1.0, 0.0, 0.0]),  # a session without a prompt: the home
    ],
)
def test_prefix_match_scores_the_share_of_the_prompt_an_endpoint_was_sent(
    held: dict[Endpoint, tuple[int, ...]], blocks: tuple[int, ...], scores: list[float]
) -> None:
    index = PrefixIndex()
    for endpoint, sent in held.items():
        index.record(endpoint, sent)
    state = cycle([A, B, C], key=RoutingKey(blocks, 7))
    assert PrefixMatch(index).score(state, [0, 1, 2]) == pytest.approx(scores)


def test_prefix_match_scores_nothing_without_a_key_and_records_only_keyed_requests() -> None:
    index = PrefixIndex()
    scorer = PrefixMatch(index)
    assert scorer.score(cycle([A, B]), [0, 1]) == [0.0, 0.0]
    scorer.pre_request(Request("m", [A, B]), A)
    assert index.size() == 0
    scorer.pre_request(Request("m", [A, B], RoutingKey((1, 2), 7)), B)
    assert index.match(B, (1, 2, 3)) == 2


def test_every_scorer_rates_from_zero_to_one_and_declares_its_category() -> None:
    rng = random.Random(3)
    index = PrefixIndex()
    scorers: list[Scorer] = [FewestInFlight(), Queue(), FreeCapacity(), PrefixMatch(index)]
    for _ in range(300):
        candidates = [A, B, C, D]
        loads = {e: EngineLoad(rng.randrange(9), rng.randrange(9), rng.uniform(-1, 2)) for e in candidates[:3]}
        in_flight = {e: rng.randrange(6) for e in candidates}
        key = RoutingKey(tuple(rng.randrange(4) for _ in range(rng.randrange(5))), 1)
        index.record(rng.choice(candidates), key.blocks)
        state = cycle(candidates, loads=loads, in_flight=in_flight, key=key)
        WithinBound(rng.choice([1.0, 1.25, 3.0])).filter(state, [0, 1, 2, 3])
        for scorer in scorers:
            assert all(0.0 <= value <= 1.0 for value in scorer.score(state, [0, 1, 2, 3])), scorer.name
    assert [scorer.category for scorer in scorers] == [BALANCE, BALANCE, BALANCE, AFFINITY]


# The cycle


def test_a_decision_is_the_pick_then_the_fallbacks_best_first() -> None:
    in_flight = InFlight()
    for endpoint, n in ((A, 2), (B, 0), (C, 1), (D, 3)):
        for _ in range(n):
            in_flight.acquire(endpoint)
    decision = LeastOutstanding(in_flight).schedule(Request("m", [A, B, C, D], excluded=frozenset({C})))
    assert decision == Decision((B, A, D))
    assert decision.endpoint == B


def test_keyed_ties_follow_the_ring_and_keyless_fallbacks_of_equal_score_keep_the_candidates_order() -> None:
    key = RoutingKey((), 99)
    ring = list(Ring([A, B, C, D]).walk(key.ring))
    aware = PrefixAware(InFlight(), weights=RoutingWeights(prefix=0, queue=1, utilisation=1), load_factor=4)
    assert aware.schedule(Request("m", [A, B, C, D], key)).endpoints == tuple(ring)
    keyless = LeastOutstanding(InFlight(), random.Random(5)).schedule(Request("m", [A, B, C, D]))
    assert keyless.endpoints[1:] == tuple(e for e in (A, B, C, D) if e != keyless.endpoint)


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (Request("m", []), "the model has no ready endpoint"),
        (Request("m", [A, B], excluded=frozenset({A, B})), "every endpoint has been tried"),
        (Request("m", [A, B], adapter=ADAPTER), "no endpoint holds the adapter"),
    ],
)
def test_when_no_endpoint_is_left_the_decision_is_empty_and_says_why(request_: Request, reason: str) -> None:
    signals = Signals(listings={A: ServedAdapters(frozenset()), B: ServedAdapters(frozenset())})
    for scheduler in (LeastOutstanding(InFlight(), adapters=signals), PrefixAware(InFlight(), adapters=signals)):
        assert scheduler.schedule(request_) == Decision((), reason)


def test_scheduling_changes_nothing_and_the_hooks_count_record_and_release_an_attempt() -> None:
    in_flight = InFlight()
    scheduler = PrefixAware(in_flight)
    heard: list[tuple[Endpoint, PromptUsage | None]] = []
    scheduler.scorers[2][0].post_response = lambda request, endpoint, usage: heard.append((endpoint, usage))  # type: ignore[method-assign]
    request = Request("m", [A, B, C], RoutingKey((1, 2, 3), 5))
    first = scheduler.schedule(request)
    assert scheduler.schedule(request) == first
    assert in_flight.busy() == {}
    assert scheduler.index.size() == 0
    endpoint = first.endpoint
    assert endpoint is not None
    scheduler.pre_request(request, endpoint)
    assert in_flight.busy() == {endpoint: 1}
    assert scheduler.index.match(endpoint, (1, 2, 3)) == 3
    scheduler.post_response(request, endpoint, PromptUsage(120, 96))
    assert in_flight.busy() == {}
    assert heard == [(endpoint, PromptUsage(120, 96))]


@pytest.mark.parametrize(
    ("engine_name", "pick_load", "asked"),
    [
        ("llamacpp", EngineLoad(2, 1), [(B, 3)]),  # serial reuse: asked, with what the pick serves (2 + 1 waiting)
        ("llamacpp", None, [(B, 0)]),  # nothing known of the pick: no one shares it
        ("vllm", EngineLoad(2, 1), []),  # shared reuse: never held
    ],
)
async def test_decide_asks_the_holds_with_the_requests_the_pick_serves(
    engine_name: str, pick_load: EngineLoad | None, asked: list[tuple[Endpoint, int]]
) -> None:
    heard: list[tuple[Endpoint, int]] = []

    class Holds:
        async def wait(self, request: Request, endpoint: Endpoint, sharing: int = 0) -> bool:
            heard.append((endpoint, sharing))
            return False

    scheduler = Scheduler(
        PREFIX_AWARE,
        InFlight(),
        filters=[],
        scorers=[],
        picker=MaxScore(random.Random(1)),
        signals=Signals({B: pick_load} if pick_load else {}),
        holds=Holds(),
    )
    decision = await scheduler.decide(Request("m", [B]), lambda endpoint: engine(engine_name))
    assert (decision.endpoint, decision.held) == (B, False)
    assert heard == asked


def test_the_two_strategies_are_configurations_of_one_scheduler() -> None:
    least, aware = LeastOutstanding(InFlight()), PrefixAware(InFlight(), weights=RoutingWeights(4, 1, 0))
    for configured in (least, aware):
        assert isinstance(configured, Scheduler)
        for method in ("schedule", "pre_request", "post_response", "pick"):
            assert getattr(type(configured), method) is getattr(Scheduler, method)
        assert isinstance(configured.picker, MaxScore)
    assert (least.strategy, least.needs_key, least.order) == (LEAST_OUTSTANDING, False, None)
    assert [f.name for f in least.filters] == ["holds-adapter", "untried"]
    assert [(s.name, w) for s, w in least.scorers] == [("fewest-in-flight", 1.0)]
    assert (aware.strategy, aware.needs_key, aware.order) == (PREFIX_AWARE, True, aware.homes)
    assert aware.homes.rings is aware.rings
    assert [f.name for f in aware.filters] == ["holds-adapter", "untried", "within-bound"]
    assert [(s.name, w) for s, w in aware.scorers] == [("queue", 1), ("free-capacity", 0), ("prefix-match", 4)]


# The proxy


async def test_the_proxy_schedules_each_attempt_and_ends_each_with_post_response_and_the_engines_usage() -> None:
    async def cached(request: web.Request) -> web.StreamResponse:
        usage = {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 32}}
        return web.json_response({"choices": [], "usage": usage})

    async with engines(1) as (engine,):
        engine.handler = cached
        with refused_endpoint() as refused:
            cluster = Cluster().synced()
            cluster.serve("m", refused, engine.endpoint)
            in_flight = InFlight()
            in_flight.acquire(engine.endpoint)  # the refusing endpoint is the least loaded: tried first
            async with running_gateway(cluster, LEAST_OUTSTANDING_GATEWAY, in_flight=in_flight) as gw:
                scheduler = gw.gateway.pickers.least_outstanding
                ended: list[tuple[Endpoint, PromptUsage | None, frozenset[Endpoint]]] = []
                post_response = scheduler.post_response

                def heard(request: Request, endpoint: Endpoint, usage: PromptUsage | None = None) -> None:
                    ended.append((endpoint, usage, request.excluded))
                    post_response(request, endpoint, usage)

                scheduler.post_response = heard  # type: ignore[method-assign]
                status, _ = await gw.post("/v1/chat/completions", {"model": "m"})
                assert status == 200
                assert ended == [
                    (refused, None, frozenset()),
                    (engine.endpoint, PromptUsage(40, 32), frozenset({refused})),
                ]
                assert in_flight.busy() == {engine.endpoint: 1}  # only the test's own count is left

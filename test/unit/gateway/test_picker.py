"""The prefix-aware picker: the CHWBL ring and its bound, the prefix index, the weighted scorers, the engines' load
with its fallback, agreement between replicas, bounded memory; and which picker a model's Playgrounds ask for."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from llmaz.apis import constants as c
from llmaz.apis.routing import LEAST_OUTSTANDING, PREFIX_AWARE, RoutingWeights
from llmaz.gateway.routing import picker as picker_module
from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.inflight import RELEASE_HORIZON, InFlight
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.picker import (
    PREFIX_BLOCKS,
    RING_POINTS,
    Pickers,
    PrefixAware,
    PrefixIndex,
    Ring,
    Rings,
    RoutingOptions,
)
from llmaz.gateway.routing.prefix import RoutingKey, routing_key
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.gateway_objects import playground

ENDPOINTS = [Endpoint(f"10.0.0.{i}", 8080) for i in range(1, 9)]
PREFIX_ONLY = RoutingWeights(prefix=1, queue=0, utilisation=0)


@dataclass
class Signals:
    """Engine loads set by the test; an endpoint left out (or marked stale) is not known."""

    loads: dict[Endpoint, EngineLoad] = field(default_factory=dict)
    stale: set[Endpoint] = field(default_factory=set)

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return None if endpoint in self.stale else self.loads.get(endpoint)


def keyed(ring: int, blocks: tuple[int, ...] = ()) -> RoutingKey:
    return RoutingKey(blocks, ring)


def chat_key(system: str, question: str, session: str | None = None) -> RoutingKey:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    found = routing_key({"messages": messages}, session)
    assert found is not None
    return found


def homes(ring: Ring, count: int) -> Counter[Endpoint]:
    keys = random.Random(7)
    return Counter(next(ring.walk(keys.getrandbits(64))) for _ in range(count))


# The ring


def test_the_ring_is_the_same_whatever_order_its_endpoints_come_in_and_walks_each_endpoint_once() -> None:
    shuffled = ENDPOINTS[:]
    random.Random(1).shuffle(shuffled)
    one, two = Ring(ENDPOINTS), Ring(shuffled)
    for point in (0, 1 << 40, 2**64 - 1, 12345678901234567):
        walked = list(one.walk(point))
        assert walked == list(two.walk(point))
        assert sorted(walked) == ENDPOINTS
    assert list(Ring([]).walk(5)) == []


def test_the_ring_shares_keys_evenly_within_twenty_percent() -> None:
    count = 40_000
    shares = homes(Ring(ENDPOINTS), count)
    even = count / len(ENDPOINTS)
    # 256 points each: the measured spread is within +-8% here; 20% is the stated tolerance.
    assert all(abs(n - even) < 0.2 * even for n in shares.values()), shares


def test_when_an_endpoint_leaves_only_its_keys_move() -> None:
    gone = ENDPOINTS[3]
    before, after = Ring(ENDPOINTS), Ring([e for e in ENDPOINTS if e != gone])
    keys = random.Random(3)
    moved = kept = 0
    for _ in range(5_000):
        point = keys.getrandbits(64)
        home_before, home_after = next(before.walk(point)), next(after.walk(point))
        if home_before == gone:
            moved += 1
            assert home_after == next(e for e in before.walk(point) if e != gone)  # the next one on the ring
        else:
            kept += 1
            assert home_after == home_before
    assert moved
    assert kept


# Bounded loads


def test_a_hot_prefix_stays_home_within_the_bound_then_spills_to_the_next_endpoint_on_the_ring() -> None:
    in_flight = InFlight()
    picker = PrefixAware(in_flight, weights=PREFIX_ONLY, load_factor=1.25)
    hot = keyed(42, (1, 2, 3))
    order = list(Ring(ENDPOINTS).walk(hot.ring))
    picked = []
    for _ in range(3):
        endpoint = picker.pick(ENDPOINTS, key=hot)
        assert endpoint is not None
        in_flight.acquire(endpoint)  # held: each request still runs when the next arrives
        picked.append(endpoint)
    # The bound: load + 1 <= ceil(1.25 x (total + 1) / 8): 1 for a total of 0 to 5, so one request each.
    assert picked == order[:3]
    for endpoint in picked:
        in_flight.release(endpoint)
    assert picker.pick(ENDPOINTS, key=hot) == order[0]  # back home once it has room


@pytest.mark.parametrize(
    ("running", "slots", "stays"),
    [(1, 2, True), (2, 2, False), (1, None, False), (3, 4, True)],
    ids=["a-free-slot", "every-slot-busy", "slots-not-known", "one-of-four-free"],
)
def test_a_prefix_stays_on_its_engine_while_the_engine_has_a_free_slot_past_the_average_bound(
    running: int, slots: int | None, stays: bool
) -> None:
    four = ENDPOINTS[:4]
    signals = Signals({e: EngineLoad(0, 0, 0.0, slots=slots) for e in four})
    picker = PrefixAware(InFlight(), signals)
    key = chat_key("You summarise legal contracts for a small firm. " * 16, "What is clause 4 about?")
    home = picker.pick(four, key=key)
    assert home is not None
    # The home runs `running` requests, the others none: CHWBL's bound, ceil(1.25 x (running + 1) / 4), is below
    # running + 1 in every case here.
    signals.loads[home] = EngineLoad(running, 0, running / (slots or 4), slots=slots)
    assert (picker.pick(four, key=key) == home) is stays


def test_a_larger_load_factor_keeps_more_of_a_hot_prefix_at_home() -> None:
    in_flight = InFlight()
    for endpoint in ENDPOINTS:
        for _ in range(4):
            in_flight.acquire(endpoint)  # total 32, average 4
    hot = keyed(99)
    home = next(Ring(ENDPOINTS).walk(hot.ring))
    tight, loose = (PrefixAware(in_flight, weights=PREFIX_ONLY, load_factor=f) for f in (1.0, 2.0))
    counts: Counter[str] = Counter()
    for name, picker in (("tight", tight), ("loose", loose)):
        while picker.pick(ENDPOINTS, key=hot) == home:
            in_flight.acquire(home)
            counts[name] += 1
        for _ in range(counts[name]):
            in_flight.release(home)
    # 1.0: 4 + 1 <= ceil(33 / 8) = 5 allows one more at home. 2.0: the bound ceil(2 x (total + 1) / 8) grows as the
    # home takes them (9, 9, 9, 10, 10, 10), so it takes six before 11 > 10.
    assert counts == {"tight": 1, "loose": 6}


def test_excluded_endpoints_are_never_picked() -> None:
    picker = PrefixAware(InFlight())
    hot = keyed(7, (1,))
    order = list(Ring(ENDPOINTS).walk(hot.ring))
    assert picker.pick(ENDPOINTS, exclude={order[0]}, key=hot) == order[1]
    assert picker.pick(ENDPOINTS, exclude=set(ENDPOINTS[1:]), key=hot) == ENDPOINTS[0]
    assert picker.pick(ENDPOINTS, exclude=set(ENDPOINTS), key=hot) is None
    assert picker.pick(ENDPOINTS[:2], exclude=set(ENDPOINTS[:2])) is None
    assert picker.pick([]) is None


# The prefix index


def test_the_index_matches_the_longest_chain_it_holds() -> None:
    index = PrefixIndex()
    a = ENDPOINTS[0]
    index.record(a, (1, 2, 3, 4))
    assert index.match(a, (1, 2, 3, 4, 5, 6)) == 4
    assert index.match(a, (1, 2, 9)) == 2
    assert index.match(a, (7, 2, 3)) == 0
    assert index.match(a, ()) == 0
    assert index.match(ENDPOINTS[1], (1, 2)) == 0


def test_the_index_is_an_lru_bounded_per_endpoint_that_evicts_a_chains_end_before_its_start() -> None:
    index = PrefixIndex(blocks=6, endpoints=2)
    a, b, d = ENDPOINTS[:3]
    index.record(a, (1, 2, 3, 4))
    index.record(a, (10, 11, 12, 13))
    assert index.size() == 6
    assert index.match(a, (10, 11, 12, 13)) == 4
    assert index.match(a, (1, 2, 3, 4)) == 2  # 3 and 4 went first, so what is held is still a prefix
    index.record(a, (1, 2))
    index.record(a, (20,))
    assert index.match(a, (1, 2)) == 2  # used again: kept
    assert index.match(a, (10, 11, 12, 13)) == 3
    index.record(b, (5,))
    index.record(d, (6,))  # a third endpoint: the one recorded to longest ago goes
    assert index.endpoints() == [b, d]


def test_forget_and_retain_drop_endpoints_that_left() -> None:
    index = PrefixIndex()
    for endpoint in ENDPOINTS[:4]:
        index.record(endpoint, (1, 2))
    index.forget(ENDPOINTS[0])
    index.retain(ENDPOINTS[1:3])
    assert index.endpoints() == ENDPOINTS[1:3]


def test_a_new_ring_prunes_endpoints_no_ring_has() -> None:
    index = PrefixIndex()
    picker = PrefixAware(InFlight(), index=index, rings=Rings(index, max_points=2 * 2 * RING_POINTS))
    picker.pick(ENDPOINTS[:3], key=keyed(1, (1,)))
    (chosen,) = picker.index.endpoints()
    others = [Endpoint(f"10.9.0.{i}", 8080) for i in range(3)]
    for i in range(2):  # two rings of two endpoints fill the bound and push that one's ring out
        picker.pick(others[i : i + 2], key=keyed(i, (i,)))
    assert chosen not in picker.index.endpoints()
    assert set(picker.index.endpoints()) <= set(others)


def test_a_ring_is_built_once_per_endpoint_set_however_many_models_take_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[Endpoint, ...]] = []

    class CountedRing(Ring):
        def __init__(self, endpoints: Sequence[Endpoint], *args: Any) -> None:
            built.append(tuple(endpoints))
            super().__init__(endpoints, *args)

    monkeypatch.setattr(picker_module, "Ring", CountedRing)
    picker = PrefixAware(InFlight())
    models = [[Endpoint(f"10.{m}.0.{i}", 8080) for i in range(8)] for m in range(100)]
    for turn in range(5):  # 100 models' requests in turn, as a busy gateway sees them
        for m, endpoints in enumerate(models):
            assert picker.pick(endpoints, key=keyed(turn * 1000 + m, (m,))) in endpoints
    assert len(built) == 100
    assert len(set(built)) == 100
    # One endpoint leaves a model: one ring more, for the new set only.
    picker.pick(models[0][1:], key=keyed(1, (1,)))
    assert built[100:] == [tuple(models[0][1:])]


def test_a_prefix_held_on_one_engine_draws_requests_from_their_own_idle_home_until_that_engine_is_busy() -> None:
    in_flight = InFlight()
    picker = PrefixAware(in_flight, load_factor=8)  # bound = total load + 1: nothing is excluded by it here
    system = "You answer questions about the 2026 tax code, citing sections. " * 16
    holder = picker.pick(ENDPOINTS, key=chat_key(system, "What changed for freelancers?"))
    assert holder is not None
    # The same system prompt in another session: another ring key, and (for one of these) another home.
    others = [chat_key(system, "And for retirees?", f"session-{i}") for i in range(20)]
    other = next(k for k in others if next(Ring(ENDPOINTS).walk(k.ring)) != holder)
    home = next(Ring(ENDPOINTS).walk(other.ring))
    assert picker.pick(ENDPOINTS, key=other) == holder  # ~0.9 x 3 + 2 + 2 beats the home's 0 + 2 + 2
    for _ in range(2):
        in_flight.acquire(holder)
    assert picker.pick(ENDPOINTS, key=other) == holder  # 2 of bound 3: ~2.7 + 0.67 + 0.67 > 4
    in_flight.acquire(holder)
    # 3 of bound 4: 3 + 0.5 + 0.5 = 4 (its prompt is all there now), a tie with the idle ones: the prefix's home wins.
    assert picker.pick(ENDPOINTS, key=other) == holder
    in_flight.acquire(holder)
    assert picker.pick(ENDPOINTS, key=other) == home  # 4 of bound 5: 3 + 0.4 + 0.4 < 4, then the ring's order
    fresh = chat_key("A different application entirely. " * 16, "Hello")
    # Held nowhere: its home, the first endpoint of its ring walk without an active prefix (the holder has two).
    assert picker.pick(ENDPOINTS, key=fresh) == next(e for e in Ring(ENDPOINTS).walk(fresh.ring) if e != holder)


# Scorers and weights


def test_with_equal_loads_the_prefix_decides_and_with_unequal_ones_the_weights_do() -> None:
    in_flight = InFlight()
    shared = keyed(5, (1, 2, 3, 4))
    order = list(Ring(ENDPOINTS).walk(shared.ring))
    home = order[0]
    picker = PrefixAware(in_flight, load_factor=8)
    assert picker.pick(ENDPOINTS, key=shared) == home  # a new prefix starts at its home
    for in_home, bound in ((1, 2), (2, 3), (3, 4)):
        in_flight.acquire(home)
        # home: 3 x 1 + (2 + 2) x (1 - in_home / bound); an idle endpoint: 0 + 2 + 2 (ties go to the home)
        assert picker.pick(ENDPOINTS, key=shared) == home, (in_home, bound)
    in_flight.acquire(home)
    assert picker.pick(ENDPOINTS, key=shared) == order[1]  # 4 of bound 5: 3 + 0.8 < 4
    light_prefix = RoutingWeights(prefix=1, queue=2, utilisation=2)
    light = PrefixAware(InFlight(), weights=light_prefix, load_factor=8)
    assert light.pick(ENDPOINTS, key=shared) == home
    light.in_flight.acquire(home)
    assert light.pick(ENDPOINTS, key=shared) == order[1]  # 1 + 1 + 1 < 0 + 2 + 2


def test_the_queue_and_utilisation_scores_read_the_engines_load() -> None:
    a, b = ENDPOINTS[:2]
    signals = Signals({a: EngineLoad(2, 2, 0.9), b: EngineLoad(4, 4, 0.1)})
    no_prefix_queue = RoutingWeights(prefix=0, queue=1, utilisation=0)
    no_prefix_free = RoutingWeights(prefix=0, queue=0, utilisation=1)
    key = keyed(3)
    assert PrefixAware(InFlight(), signals, no_prefix_queue, load_factor=10).pick([a, b], key=key) == a
    assert PrefixAware(InFlight(), signals, no_prefix_free, load_factor=10).pick([a, b], key=key) == b
    assert PrefixAware(InFlight(), signals, no_prefix_queue, load_factor=10).pick([a, b]) == a


def test_the_load_is_the_larger_of_the_engines_count_and_this_replicas_own() -> None:
    a, b = ENDPOINTS[:2]
    in_flight = InFlight()
    for _ in range(6):
        in_flight.acquire(a)  # the engine has not counted them yet
    signals = Signals({a: EngineLoad(1, 0), b: EngineLoad(3, 0)})
    picker = PrefixAware(in_flight, signals, RoutingWeights(prefix=0, queue=1, utilisation=0), load_factor=10)
    assert picker.pick([a, b]) == b


def test_requests_that_ended_here_since_the_engine_was_asked_are_taken_off_its_counts() -> None:
    # A chat's next turn comes the moment its previous turn ends, while the engine's counts, read a moment before,
    # still hold that turn: the engine holding the chat must not look busy with the chat itself.
    a, b = ENDPOINTS[:2]
    now = [100.0]
    in_flight = InFlight(clock=lambda: now[0])
    signals = Signals({a: EngineLoad(2, 0, 1.0, observed_at=99.5), b: EngineLoad(0, 0, 0.0, observed_at=99.5)})
    picker = PrefixAware(in_flight, signals)
    turn = keyed(7, (1, 2, 3, 4))
    picker.index.record(a, turn.blocks)
    for _ in range(2):  # this replica's two requests to a, counted by the engine at 99.5, end at 100
        in_flight.acquire(a)
        in_flight.release(a)
    assert in_flight.released_since(a, 99.5) == 2
    assert picker.pick([a, b], key=turn) == a  # a is idle now: the prefix decides
    stale_view = PrefixAware(InFlight(), signals)  # nothing ended here: a still runs 2 of bound 2
    stale_view.index.record(a, turn.blocks)
    assert stale_view.pick([a, b], key=turn) == b


def test_released_since_counts_recent_releases_of_one_endpoint_within_the_horizon() -> None:
    a, b = ENDPOINTS[:2]
    now = [0.0]
    in_flight = InFlight(clock=lambda: now[0])
    for at in (1.0, 2.0, 3.0):
        now[0] = at
        in_flight.acquire(a)
        in_flight.release(a)
    assert [in_flight.released_since(a, t) for t in (0.5, 1.0, 2.5, 3.0)] == [3, 2, 1, 0]
    assert in_flight.released_since(b, 0.0) == 0
    now[0] = 3.0 + RELEASE_HORIZON + 1
    in_flight.acquire(a)
    in_flight.release(a)
    assert in_flight.released_since(a, 0.0) == 1  # the old ones are forgotten


def test_acquired_since_counts_recent_attempts_started_at_one_endpoint() -> None:
    a, b = ENDPOINTS[:2]
    now = [0.0]
    in_flight = InFlight(clock=lambda: now[0])
    for at in (1.0, 2.0, 3.0):
        now[0] = at
        in_flight.acquire(a)
    in_flight.release(a)
    assert [in_flight.acquired_since(a, t) for t in (0.5, 1.0, 2.5, 3.0)] == [3, 2, 1, 0]
    assert in_flight.acquired_since(b, 0.0) == 0
    now[0] = 3.0 + RELEASE_HORIZON + 1
    in_flight.acquire(a)
    assert in_flight.acquired_since(a, 0.0) == 1  # the old ones are forgotten


def test_stale_or_missing_signals_fall_back_to_the_in_flight_counts() -> None:
    a, b = ENDPOINTS[:2]
    in_flight = InFlight()
    in_flight.acquire(b)
    signals = Signals({a: EngineLoad(9, 9, 0.99)})
    picker = PrefixAware(in_flight, signals, load_factor=10)
    assert picker.pick([a, b]) == b  # the engine's own load makes a the busier one
    signals.stale.add(a)
    assert picker.pick([a, b]) == a  # stale: a's load is what this replica sent it, nothing


def test_without_a_key_idle_endpoints_share_requests_at_random() -> None:
    picker = PrefixAware(InFlight(), rng=random.Random(4))
    picks = Counter(picker.pick(ENDPOINTS) for _ in range(800))
    assert set(picks) == set(ENDPOINTS)
    assert picker.index.size() == 0  # nothing to remember


# Two replicas


def test_two_replicas_fed_the_same_requests_pick_the_same_endpoints() -> None:
    def replay(seed: int) -> list[Endpoint | None]:
        in_flight = InFlight()
        signals = Signals({e: EngineLoad(i % 3, i % 2, i / 10) for i, e in enumerate(ENDPOINTS)})
        picker = PrefixAware(in_flight, signals, rng=random.Random(seed))
        requests = random.Random(11)
        picked: list[Endpoint | None] = []
        held: list[Endpoint] = []
        for i in range(500):
            prompt = f"system prompt {requests.randrange(12)} " * 10 + f"question {requests.randrange(50)}"
            key = routing_key({"prompt": prompt, "user": f"u{requests.randrange(30)}" if i % 3 else ""})
            endpoint = picker.pick(ENDPOINTS, key=key)
            picked.append(endpoint)
            if endpoint is not None:
                in_flight.acquire(endpoint)
                held.append(endpoint)
            if len(held) > 20:
                in_flight.release(held.pop(requests.randrange(len(held))))
        return picked

    first, second = replay(1), replay(2)
    assert first == second
    assert len(set(first)) == len(ENDPOINTS)


# Memory


def test_a_hundred_thousand_distinct_prompts_keep_the_picker_within_its_bound() -> None:
    picker = PrefixAware(InFlight(), rng=random.Random(5))
    rings = random.Random(6)
    for i in range(100_000):
        # Four blocks each: 400,000 distinct blocks sent, six times what the index may hold.
        picker.pick(ENDPOINTS, key=RoutingKey((4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3), rings.getrandbits(64)))
    assert picker.index.size() == len(ENDPOINTS) * PREFIX_BLOCKS
    # 65,536 blocks held: an LRU entry and its int key cost ~160 bytes, so ~10.3 MB.
    assert picker.index.footprint() < 12 * 1024 * 1024


# Which picker


def annotated(name: str, namespace: str = "default", **annotations: str) -> dict[str, object]:
    obj = playground(name, "m", namespace)
    obj["metadata"]["annotations"] = annotations
    return obj


def test_the_gateways_strategy_applies_unless_a_playground_names_another() -> None:
    pickers = Pickers(InFlight(), options=RoutingOptions(strategy=LEAST_OUTSTANDING))
    assert isinstance(pickers.for_playgrounds([]), LeastOutstanding)
    assert isinstance(pickers.for_playgrounds([annotated("p")]), LeastOutstanding)
    prefix = pickers.for_playgrounds([annotated("p", **{c.ROUTING_STRATEGY_ANNOTATION: PREFIX_AWARE})])
    assert prefix is pickers.prefix_aware
    aware = Pickers(InFlight())  # the default: prefix-aware
    assert aware.for_playgrounds([]) is aware.prefix_aware
    assert isinstance(
        aware.for_playgrounds([annotated("p", **{c.ROUTING_STRATEGY_ANNOTATION: LEAST_OUTSTANDING})]), LeastOutstanding
    )


def test_weights_named_by_a_playground_replace_the_gateways_and_share_its_index() -> None:
    options = RoutingOptions(strategy=PREFIX_AWARE, weights=RoutingWeights(prefix=4, queue=1, utilisation=1))
    pickers = Pickers(InFlight(), options=options)
    picker = pickers.for_playgrounds([annotated("p", **{c.ROUTING_WEIGHTS_ANNOTATION: "queue=0, utilization=3"})])
    assert isinstance(picker, PrefixAware)
    assert picker.weights == RoutingWeights(prefix=4, queue=0, utilisation=3)
    assert picker.index is pickers.prefix_aware.index
    assert (
        pickers.for_playgrounds([annotated("q", **{c.ROUTING_WEIGHTS_ANNOTATION: "utilisation=3,queue=0"})]) is picker
    )


@pytest.mark.parametrize(
    "annotations",
    [{c.ROUTING_STRATEGY_ANNOTATION: "round-robin"}, {c.ROUTING_WEIGHTS_ANNOTATION: "prefix=lots"}],
)
def test_a_stored_bad_annotation_is_ignored_and_the_next_playground_decides(annotations: dict[str, str]) -> None:
    pickers = Pickers(InFlight(), options=RoutingOptions(strategy=LEAST_OUTSTANDING))
    bad = annotated("a", **annotations)
    good = annotated("b", **{c.ROUTING_STRATEGY_ANNOTATION: PREFIX_AWARE})
    assert pickers.for_playgrounds([good, bad]) is pickers.prefix_aware
    assert isinstance(pickers.for_playgrounds([bad]), LeastOutstanding)


def test_the_first_annotated_playground_by_namespace_and_name_decides() -> None:
    pickers = Pickers(InFlight())
    first = annotated("z", "a-ns", **{c.ROUTING_STRATEGY_ANNOTATION: PREFIX_AWARE})
    second = annotated("a", "b-ns", **{c.ROUTING_STRATEGY_ANNOTATION: LEAST_OUTSTANDING})
    assert pickers.for_playgrounds([second, first]) is pickers.prefix_aware


def test_a_load_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PrefixAware(InFlight(), load_factor=0.9)

"""Prefix homes: every active prefix has one endpoint, the active prefixes are spread evenly over the endpoints, a
home is kept while its prefix is active and forgotten after, and a replica adopts the home another replica chose."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llmaz.apis.routing import RoutingWeights
from llmaz.gateway.routing.homes import PrefixHomes
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import PrefixAware, PrefixIndex, Ring, Rings
from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage, Request

ENDPOINTS = [Endpoint(f"10.0.0.{i}", 8080) for i in range(1, 5)]
PREFIX_ONLY = RoutingWeights(prefix=1, queue=0, utilisation=0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def prefix(ring: int, blocks: int = 16) -> RoutingKey:
    return RoutingKey(tuple(ring * 1000 + b for b in range(blocks)), ring)


def send(picker: PrefixAware, key: RoutingKey) -> Endpoint:
    """One request of `key`, sent where the picker decides and ended at once."""
    request = Request("m", ENDPOINTS, key)
    endpoint = picker.schedule(request).endpoint
    assert endpoint is not None
    picker.pre_request(request, endpoint)
    picker.post_response(request, endpoint)
    return endpoint


@pytest.mark.parametrize("seed", range(20))
def test_eight_prefixes_over_four_endpoints_get_two_homes_each_whatever_their_ring_positions(seed: int) -> None:
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY)
    keys = [prefix(random.Random(seed).getrandbits(64) ^ n) for n in range(8)]
    homes = Counter(send(picker, key) for key in keys)
    assert sorted(homes.values()) == [2, 2, 2, 2]
    for key in keys:  # and each prefix's later requests go to its home
        assert send(picker, key) == picker.homes.home_of(key)


def test_the_rings_first_endpoints_alone_are_rarely_even() -> None:
    even = 0
    for seed in range(20):
        keys = [random.Random(seed).getrandbits(64) ^ n for n in range(8)]
        firsts = Counter(next(Ring(ENDPOINTS).walk(key)) for key in keys)
        even += sorted(firsts.values()) == [2, 2, 2, 2]
    assert even <= 4


def test_a_home_is_kept_while_its_prefix_is_active_and_forgotten_after_it_has_been_idle() -> None:
    clock = Clock()
    homes = PrefixHomes(Rings(PrefixIndex()), idle_after=60.0, clock=clock)
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY, homes=homes)
    first = prefix(1)
    home = send(picker, first)
    assert homes.homes(home) == 1
    for n in range(2, 8):  # six more prefixes take the other endpoints first, then share them evenly
        send(picker, prefix(n))
        clock.now += 10.0
        assert send(picker, first) == home  # still active: it stays, whatever the bound says of a newcomer
    clock.now += 60.0
    assert homes.homes(home) == 0
    assert len(homes) == 0


def test_a_home_that_left_the_candidates_is_not_used_and_the_next_attempt_records_a_new_one() -> None:
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY)
    key = prefix(5)
    home = send(picker, key)
    remaining = [endpoint for endpoint in ENDPOINTS if endpoint != home]
    request = Request("m", remaining, key)
    moved = picker.schedule(request).endpoint
    assert moved is not None
    assert moved != home
    picker.pre_request(request, moved)
    picker.post_response(request, moved)
    assert picker.homes.home_of(key) == moved
    assert picker.homes.homes(home) == 0


def test_homes_count_at_most_their_bound_the_least_recently_sent_going_first() -> None:
    homes = PrefixHomes(Rings(PrefixIndex()), max_homes=3)
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY, homes=homes)
    for n in range(10):
        send(picker, prefix(n))
    assert len(homes) == 3
    assert sum(homes.homes(endpoint) for endpoint in ENDPOINTS) == 3
    assert [homes.home_of(prefix(n)) is not None for n in (6, 7, 8, 9)] == [False, True, True, True]


def test_a_load_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PrefixHomes(Rings(PrefixIndex()), load_factor=0.5)


def test_an_answer_showing_the_prefix_cached_where_this_replica_did_not_send_it_makes_that_endpoint_its_home() -> None:
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY)
    key = prefix(9)
    home = send(picker, key)
    elsewhere = next(endpoint for endpoint in ENDPOINTS if endpoint != home)
    # A retry excluded the home; the engine there holds 90 % of the prompt, which this replica never sent it.
    request = Request("m", ENDPOINTS, key, excluded=frozenset({home}))
    assert picker.schedule(request).endpoint is not None
    picker.pre_request(request, elsewhere)
    picker.post_response(request, elsewhere, PromptUsage(prompt_tokens=1000, cached_tokens=900))
    assert picker.homes.home_of(key) == elsewhere
    assert send(picker, key) == elsewhere


@pytest.mark.parametrize(
    ("cached", "adopted"),
    [(900, True), (400, False), (0, False), (None, False)],
    ids=["most-cached", "less-than-half", "none-cached", "not-reported"],
)
def test_only_an_answer_with_most_of_the_prompt_cached_moves_a_home(cached: int | None, adopted: bool) -> None:
    picker = PrefixAware(InFlight(), weights=PREFIX_ONLY)
    key = prefix(11)
    home = send(picker, key)
    elsewhere = next(endpoint for endpoint in ENDPOINTS if endpoint != home)
    request = Request("m", ENDPOINTS, key)
    picker.pre_request(request, elsewhere)
    picker.post_response(request, elsewhere, PromptUsage(prompt_tokens=1000, cached_tokens=cached))
    assert picker.homes.home_of(key) == (elsewhere if adopted else home)


def test_two_replicas_that_see_the_prefixes_in_the_same_order_give_them_the_same_homes() -> None:
    first, second = PrefixAware(InFlight(), weights=PREFIX_ONLY), PrefixAware(InFlight(), weights=PREFIX_ONLY)
    keys = [prefix(random.Random(3).getrandbits(64) ^ n) for n in range(12)]
    assert [send(first, key) for key in keys] == [send(second, key) for key in keys]

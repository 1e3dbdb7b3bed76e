"""Fewest outstanding requests, with random tie-breaking and exclusion of endpoints already tried, read from the
one in-flight count."""

from __future__ import annotations

import random
from collections import Counter

from llmaz.gateway.routing.balancer import LeastOutstanding
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.routes import Endpoint

A, B, C = Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080), Endpoint("10.0.0.3", 8080)


def test_the_endpoint_with_the_fewest_outstanding_requests_wins() -> None:
    balancer = LeastOutstanding(InFlight(), random.Random(1))
    for endpoint, load in ((A, 3), (B, 1), (C, 2)):
        for _ in range(load):
            balancer.in_flight.acquire(endpoint)
    assert balancer.pick([A, B, C]) == B
    balancer.in_flight.acquire(B)
    balancer.in_flight.acquire(B)
    assert balancer.pick([A, B, C]) == C


def test_requests_spread_evenly_when_each_is_held_until_the_others_arrive() -> None:
    balancer = LeastOutstanding(InFlight(), random.Random(2))
    picked = []
    for _ in range(30):
        endpoint = balancer.pick([A, B, C])
        assert endpoint is not None
        balancer.in_flight.acquire(endpoint)
        picked.append(endpoint)
    assert Counter(picked) == {A: 10, B: 10, C: 10}


def test_ties_are_broken_at_random_so_idle_endpoints_share_the_load() -> None:
    balancer = LeastOutstanding(InFlight(), random.Random(3))
    picks = Counter(balancer.pick([A, B, C]) for _ in range(300))
    assert set(picks) == {A, B, C}
    assert min(picks.values()) > 50


def test_excluded_endpoints_are_never_picked_and_none_is_left_when_all_are() -> None:
    balancer = LeastOutstanding(InFlight(), random.Random(4))
    balancer.in_flight.acquire(B)
    assert balancer.pick([A, B], exclude={A}) == B
    assert balancer.pick([A, B], exclude={A, B}) is None
    assert balancer.pick([]) is None


def test_released_endpoints_leave_the_table_so_it_holds_only_busy_ones() -> None:
    in_flight = InFlight()
    in_flight.acquire(A)
    in_flight.acquire(A)
    in_flight.acquire(B)
    in_flight.release(A)
    assert in_flight.busy() == {A: 1, B: 1}
    in_flight.release(A)
    in_flight.release(B)
    in_flight.release(B)  # an unmatched release cannot go negative
    assert in_flight.busy() == {}
    assert in_flight.outstanding(A) == 0


def test_the_one_count_per_model_feeds_its_watchers_and_never_goes_negative() -> None:
    in_flight = InFlight()
    heard: list[tuple[str, int]] = []
    in_flight.watch(lambda model, count: heard.append((model, count)))
    with in_flight.request("m"):
        in_flight.started("m")
        assert in_flight.of_model("m") == 2
        in_flight.finished("m")
    in_flight.finished("m")  # an unmatched finish
    assert in_flight.of_model("m") == 0
    assert heard == [("m", 1), ("m", 2), ("m", 1), ("m", 0), ("m", 0)]

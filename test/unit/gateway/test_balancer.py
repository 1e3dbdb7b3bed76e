"""Fewest outstanding requests, with random tie-breaking and exclusion of endpoints already tried."""

from __future__ import annotations

import random
from collections import Counter

from llmaz.gateway.balancer import LeastOutstanding
from llmaz.gateway.routes import Endpoint

A, B, C = Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080), Endpoint("10.0.0.3", 8080)


def test_the_endpoint_with_the_fewest_outstanding_requests_wins() -> None:
    balancer = LeastOutstanding(random.Random(1))
    for endpoint, load in ((A, 3), (B, 1), (C, 2)):
        for _ in range(load):
            balancer.acquire(endpoint)
    assert balancer.pick([A, B, C]) == B
    balancer.acquire(B)
    balancer.acquire(B)
    assert balancer.pick([A, B, C]) == C


def test_requests_spread_evenly_when_each_is_held_until_the_others_arrive() -> None:
    balancer = LeastOutstanding(random.Random(2))
    picked = []
    for _ in range(30):
        endpoint = balancer.pick([A, B, C])
        assert endpoint is not None
        balancer.acquire(endpoint)
        picked.append(endpoint)
    assert Counter(picked) == {A: 10, B: 10, C: 10}


def test_ties_are_broken_at_random_so_idle_endpoints_share_the_load() -> None:
    balancer = LeastOutstanding(random.Random(3))
    picks = Counter(balancer.pick([A, B, C]) for _ in range(300))
    assert set(picks) == {A, B, C}
    assert min(picks.values()) > 50


def test_excluded_endpoints_are_never_picked_and_none_is_left_when_all_are() -> None:
    balancer = LeastOutstanding(random.Random(4))
    balancer.acquire(B)
    assert balancer.pick([A, B], exclude={A}) == B
    assert balancer.pick([A, B], exclude={A, B}) is None
    assert balancer.pick([]) is None


def test_released_endpoints_leave_the_table_so_it_holds_only_busy_ones() -> None:
    balancer = LeastOutstanding()
    balancer.acquire(A)
    balancer.acquire(A)
    balancer.acquire(B)
    balancer.release(A)
    assert balancer.busy() == {A: 1, B: 1}
    balancer.release(A)
    balancer.release(B)
    balancer.release(B)  # an unmatched release cannot go negative
    assert balancer.busy() == {}
    assert balancer.outstanding(A) == 0

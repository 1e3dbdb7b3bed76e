"""The discipline of a model's flow-control queue, pure: bands, fairness between tenants, its size and TTL."""

from __future__ import annotations

import pytest

from llmaz.gateway.flow.priority import DEFAULT_PRIORITY, PriorityError, band_of, parse_priority
from llmaz.gateway.flow.queue import FlowQueue, Waiter


def waiter(band: int = 5, tenant: str = "a", cost: int = 100, at: float = 0.0) -> Waiter:
    return Waiter(band, tenant, cost, at)


def drain(queue: FlowQueue) -> list[Waiter]:
    out = []
    while (next_one := queue.pop()) is not None:
        out.append(next_one)
    return out


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def test_a_higher_band_is_always_served_first_whatever_arrived_before() -> None:
    queue = FlowQueue(max_size=100, ttl=60)
    low = [waiter(band=1, tenant="batch") for _ in range(3)]
    high = [waiter(band=8, tenant="chat") for _ in range(2)]
    middle = waiter(band=5, tenant="batch")
    for w in (*low, middle, *high):
        assert queue.push(w) is None
    assert drain(queue) == [*high, middle, *low]


def test_within_a_band_each_tenant_is_served_in_its_arrival_order() -> None:
    queue = FlowQueue(max_size=100, ttl=60)
    first, second = waiter(tenant="a"), waiter(tenant="a")
    queue.push(first)
    queue.push(second)
    assert drain(queue) == [first, second]


def test_two_tenants_at_four_to_one_arrivals_are_served_equal_tokens() -> None:
    """A simulated saturated model serving one request per tick; tenant a offers four requests a tick, b one, both
    more than their share. Jain's index of the tokens served is at least 0.95."""
    queue = FlowQueue(max_size=10_000, ttl=1e9)
    served = {"a": 0.0, "b": 0.0}
    for tick in range(2000):
        for _ in range(4):
            queue.push(waiter(tenant="a", cost=100, at=tick))
        queue.push(waiter(tenant="b", cost=100, at=tick))
        dispatched = queue.pop()
        assert dispatched is not None
        served[dispatched.tenant] += dispatched.cost
    assert jain(list(served.values())) >= 0.95
    assert served["b"] >= 0.45 * sum(served.values())


def test_fairness_is_by_tokens_a_tenant_of_small_requests_is_served_more_of_them() -> None:
    queue = FlowQueue(max_size=10_000, ttl=1e9)
    served = {"small": 0.0, "large": 0.0}
    count = {"small": 0, "large": 0}
    for tick in range(2000):
        queue.push(waiter(tenant="small", cost=50, at=tick))
        queue.push(waiter(tenant="small", cost=50, at=tick))
        queue.push(waiter(tenant="large", cost=200, at=tick))
        dispatched = queue.pop()
        assert dispatched is not None
        served[dispatched.tenant] += dispatched.cost
        count[dispatched.tenant] += 1
    assert jain(list(served.values())) >= 0.95
    assert count["small"] > 3 * count["large"]


def test_settling_a_tenants_real_usage_corrects_its_share() -> None:
    """Both tenants' requests are estimated at 100 tokens; a's really use 300. Settled, b is served three of its
    requests for each of a's."""
    queue = FlowQueue(max_size=10_000, ttl=1e9)
    count = {"a": 0, "b": 0}
    for tick in range(1000):
        queue.push(waiter(tenant="a", cost=100, at=tick))
        queue.push(waiter(tenant="b", cost=100, at=tick))
        dispatched = queue.pop()
        assert dispatched is not None
        count[dispatched.tenant] += 1
        queue.settle(dispatched.band, dispatched.tenant, 200 if dispatched.tenant == "a" else 0)
    assert 2.5 < count["b"] / count["a"] < 3.5


def test_a_tenant_back_from_idle_banks_no_credit() -> None:
    """b was idle while a was served 50 requests alone: when b comes back it alternates with a, rather than taking
    the next 50 turns."""
    queue = FlowQueue(max_size=10_000, ttl=1e9)
    for _ in range(100):
        queue.push(waiter(tenant="a"))
    for _ in range(50):
        queue.pop()
    for _ in range(10):
        queue.push(waiter(tenant="b"))
    order = [w.tenant for w in drain(queue)[:10]]
    assert order.count("a") == 5
    assert order.count("b") == 5


def test_a_full_queue_sheds_the_newest_waiter_of_the_lowest_band() -> None:
    queue = FlowQueue(max_size=3, ttl=60)
    old_low, new_low, high = waiter(band=1), waiter(band=1), waiter(band=8)
    for w in (old_low, new_low, high):
        assert queue.push(w) is None
    arrival = waiter(band=5)
    assert queue.push(arrival) is new_low
    assert len(queue) == 3
    assert drain(queue) == [high, arrival, old_low]


def test_an_arrival_to_a_full_queue_in_its_lowest_band_is_itself_shed() -> None:
    queue = FlowQueue(max_size=2, ttl=60)
    queued = [waiter(band=5), waiter(band=8)]
    for w in queued:
        queue.push(w)
    lowest = waiter(band=5)
    assert queue.push(lowest) is lowest
    assert queue.push(waiter(band=2)) is not None
    assert drain(queue) == [queued[1], queued[0]]


def test_waiters_past_their_ttl_are_expired_oldest_first_and_never_dispatched() -> None:
    queue = FlowQueue(max_size=10, ttl=30)
    old_a = waiter(tenant="a", at=0)
    old_b = waiter(tenant="b", band=9, at=5)
    young = waiter(tenant="a", at=20)
    for w in (old_a, old_b, young):
        queue.push(w)
    assert queue.next_deadline() == 30
    assert queue.expire(29.9) == []
    assert queue.expire(35) == [old_a, old_b]
    assert queue.next_deadline() == 50
    assert drain(queue) == [young]
    assert queue.next_deadline() is None


def test_a_waiter_whose_client_went_away_is_removed_and_only_once() -> None:
    queue = FlowQueue(max_size=10, ttl=30)
    gone, stays = waiter(tenant="a"), waiter(tenant="b")
    queue.push(gone)
    queue.push(stays)
    assert queue.remove(gone)
    assert not queue.remove(gone)
    assert len(queue) == 1
    assert drain(queue) == [stays]
    assert not queue.remove(stays)


def test_the_priority_header_is_a_small_integer_lowered_to_the_keys_priority() -> None:
    assert band_of(None, authenticated=False, key_priority=None) == DEFAULT_PRIORITY
    assert band_of("9", authenticated=False, key_priority=None) == 9
    assert band_of(None, authenticated=True, key_priority=7) == 7
    assert band_of("2", authenticated=True, key_priority=7) == 2
    assert band_of("9", authenticated=True, key_priority=7) == 7
    assert band_of("9", authenticated=True, key_priority=None) == DEFAULT_PRIORITY
    assert parse_priority(" 0 ") == 0


@pytest.mark.parametrize("value", ["10", "-1", "high", "1.5", "", "0x3", "99999999999"])
def test_a_priority_that_is_not_an_integer_from_0_to_9_is_refused_saying_the_range(value: str) -> None:
    with pytest.raises(PriorityError, match="an integer from 0 to 9"):
        parse_priority(value)


def test_a_waiter_with_its_own_ttl_expires_at_its_own_deadline_not_the_queues() -> None:
    queue = FlowQueue(max_size=10, ttl=30)
    waking = Waiter(5, "a", 100, 0.0, ttl=300)
    plain = waiter(tenant="a", at=10)
    queue.push(waking)
    queue.push(plain)
    assert queue.next_deadline() == 40
    assert queue.expire(40) == [plain]
    assert queue.next_deadline() == 300
    assert queue.expire(299.9) == []
    assert queue.expire(300) == [waking]
    assert len(queue) == 0
    assert queue.next_deadline() is None


def test_a_waiter_gone_before_its_deadline_is_neither_expired_nor_a_deadline() -> None:
    queue = FlowQueue(max_size=10, ttl=30)
    gone, taken, stays = waiter(tenant="a", at=0), waiter(tenant="b", at=1), waiter(tenant="c", at=2)
    for w in (gone, taken, stays):
        queue.push(w)
    assert queue.remove(gone)
    assert queue.pop() is taken
    assert queue.next_deadline() == 32
    assert queue.expire(100) == [stays]


@pytest.mark.parametrize("ttl", [0.0, -1.0])
def test_a_waiters_own_ttl_must_be_positive(ttl: float) -> None:
    with pytest.raises(ValueError, match="a waiter's ttl must be a positive number of seconds"):
        FlowQueue(max_size=10, ttl=30).push(Waiter(5, "a", 1, 0.0, ttl=ttl))

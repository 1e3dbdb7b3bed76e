"""Rate limiter arithmetic and the rate-limiting queue."""

from __future__ import annotations

import pytest

from llmaz.runtime.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimitingQueue,
    default_controller_rate_limiter,
)
from llmaz_dev.testing import FakeClock


def test_exponential_backoff_doubles_from_5_ms_and_caps_at_1000_s() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:6] == [0.005, 0.01, 0.02, 0.04, 0.08, 0.16]
    assert delays[10] == pytest.approx(5.12)
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues("a") == 20


def test_exponential_backoff_is_tracked_per_item_and_reset_by_forget() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == 0.005
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005
    assert limiter.num_requeues("b") == 1


def test_exponential_backoff_stays_at_the_cap_after_very_many_failures() -> None:
    limiter = ItemExponentialFailureRateLimiter(base=0.001, max_delay=60.0)
    for _ in range(1100):
        delay = limiter.when("a")
    assert delay == 60.0


def test_bucket_allows_a_burst_then_spaces_retries_100_ms_apart() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10.0, burst=100, clock=clock)
    assert [limiter.when(f"item-{i}") for i in range(100)] == [0.0] * 100
    assert [limiter.when(f"more-{i}") for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_bucket_refills_at_its_rate_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10.0, burst=100, clock=clock)
    for i in range(100):
        limiter.when(i)
    clock.step(0.5)  # five tokens back
    assert [limiter.when(i) for i in range(6)] == pytest.approx([0.0] * 5 + [0.1])
    clock.step(3600.0)  # refills to the burst, not beyond
    assert [limiter.when(i) for i in range(101)][-1] == pytest.approx(0.1)


def test_bucket_keeps_no_per_item_history() -> None:
    limiter = BucketRateLimiter(clock=FakeClock())
    limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_max_of_answers_the_longest_delay_and_the_most_requeues() -> None:
    slow = ItemExponentialFailureRateLimiter(base=1.0, max_delay=100.0)
    fast = ItemExponentialFailureRateLimiter(base=0.01, max_delay=100.0)
    limiter = MaxOfRateLimiter(fast, slow)
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert slow.num_requeues("a") == 0
    assert fast.num_requeues("a") == 0


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter()


def test_default_controller_limiter_is_per_item_backoff_bounded_by_10_qps_overall() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    assert [limiter.when(f"item-{i}") for i in range(100)] == [0.005] * 100
    assert limiter.when("item-100") == pytest.approx(0.1)
    assert limiter.num_requeues("item-0") == 1


async def test_add_rate_limited_waits_the_limiter_delay_and_forget_resets_it() -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=clock)
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 1
    await clock.wait_for_sleepers()
    assert clock.next_deadline() == pytest.approx(clock.now() + 0.005)
    clock.step(0.005)
    assert await queue.get() == "a"
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 2
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.shut_down()


async def test_rate_limiting_queue_uses_the_limiter_it_is_given() -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        clock=clock, rate_limiter=ItemExponentialFailureRateLimiter(base=2.0, max_delay=10.0)
    )
    queue.add_rate_limited("a")
    await clock.wait_for_sleepers()
    assert clock.next_deadline() == clock.now() + 2.0
    queue.shut_down()

"""The one backoff helper: a policy's waits grow by its factor, jitter only stretches them, the cap bounds every
single wait, and the stateful walk starts over on reset or after a quiet period."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from llmaz.runtime.backoff import Backoff, ExponentialBackoff
from llmaz_dev.testing.clock import FakeClock


class MaxJitter(random.Random):
    def random(self) -> float:
        return 1.0


def test_waits_grow_by_the_factor_up_to_the_cap() -> None:
    assert list(Backoff(duration=0.5, factor=2.0, cap=3.0, steps=6).delays()) == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_stretches_a_wait_by_up_to_its_share_and_the_cap_still_bounds_it() -> None:
    policy = Backoff(duration=1.0, factor=2.0, jitter=0.5, cap=3.0)
    assert [policy.wait(step, MaxJitter()) for step in range(3)] == [1.5, 3.0, 3.0]
    rng = random.Random(3)
    for step in range(5):
        base = min(2.0**step, 3.0)
        assert base <= policy.wait(step, rng) <= 3.0


def test_a_bounded_policy_has_one_wait_fewer_than_its_steps_and_an_unbounded_one_never_ends() -> None:
    assert len(list(Backoff(duration=1.0, steps=4).delays())) == 3
    assert list(itertools.islice(Backoff(duration=1.0, factor=3.0).delays(), 5)) == [1.0, 3.0, 9.0, 27.0, 81.0]


async def test_the_walk_starts_over_on_reset() -> None:
    clock = FakeClock()
    backoff = ExponentialBackoff(Backoff(duration=0.8, factor=2.0, cap=2.0), clock=clock)
    assert [backoff.next_delay() for _ in range(4)] == [0.8, 1.6, 2.0, 2.0]
    backoff.reset()
    assert backoff.next_delay() == 0.8
    task = asyncio.ensure_future(backoff.wait())
    await clock.wait_for_sleepers()
    clock.step(1.6)
    assert await task == 1.6


@pytest.mark.parametrize(("quiet", "expected"), [(120.0, 3.2), (120.5, 0.8)])
def test_the_walk_starts_over_after_reset_after_seconds_without_a_wait(quiet: float, expected: float) -> None:
    clock = FakeClock()
    backoff = ExponentialBackoff(Backoff(duration=0.8, factor=2.0, cap=30.0), reset_after=120.0, clock=clock)
    assert [backoff.next_delay(), backoff.next_delay()] == [0.8, 1.6]
    clock.step(quiet)
    assert backoff.next_delay() == expected


def test_past_the_cap_the_walk_stays_finite() -> None:
    backoff = ExponentialBackoff(Backoff(duration=1.0, factor=10.0, cap=5.0))
    assert [backoff.next_delay() for _ in range(2000)][1:] == [5.0] * 1999  # 10**2000 would overflow a float

"""The FakeClock test helper keeps its documented promises."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from llmaz_dev.testing import FakeClock

from .helpers import settle


async def test_sleep_returns_only_once_time_has_been_advanced_past_its_deadline() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(5.0))
    await clock.wait_for_sleepers()
    clock.step(4.0)
    await settle()
    assert not sleeper.done()
    clock.step(1.0)
    await sleeper


async def test_sleepers_wake_earliest_deadline_first() -> None:
    clock = FakeClock()
    woke: list[float] = []

    async def sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(seconds)

    tasks = [asyncio.create_task(sleep(s)) for s in (3.0, 1.0, 2.0)]
    await clock.wait_for_sleepers(3)
    clock.set(clock.now() + 10.0)
    await asyncio.gather(*tasks)
    assert woke == [1.0, 2.0, 3.0]


async def test_sleep_of_zero_returns_without_a_step() -> None:
    clock = FakeClock()
    await clock.sleep(0)
    assert clock.sleepers == 0


async def test_a_cancelled_sleeper_is_forgotten() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(5.0))
    await clock.wait_for_sleepers()
    sleeper.cancel()
    await settle()
    assert clock.sleepers == 0
    assert clock.next_deadline() is None


def test_wall_time_moves_with_the_monotonic_time() -> None:
    clock = FakeClock()
    start = clock.wall()
    clock.step(90.0)
    assert clock.wall() - start == timedelta(seconds=90)
    assert clock.wall().tzinfo is not None


def test_time_cannot_go_backwards() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="backwards"):
        clock.step(-1.0)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(clock.now() - 1.0)


async def test_wait_for_sleepers_fails_when_nobody_sleeps() -> None:
    clock = FakeClock()
    with pytest.raises(AssertionError, match="sleeper"):
        await clock.wait_for_sleepers(within=0.1)

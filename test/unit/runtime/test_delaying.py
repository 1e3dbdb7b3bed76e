"""The delaying queue, driven by a FakeClock."""

from __future__ import annotations

import pytest

from llmaz.runtime.workqueue import DelayingQueue, QueueShutDownError
from llmaz.runtime.workqueue.delaying import MAX_WAIT
from llmaz_dev.testing import FakeClock

from .helpers import sample, settle


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_add_after_adds_the_item_once_its_delay_has_passed(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 5.0)
    await clock.wait_for_sleepers()
    clock.step(4.9)
    await settle()
    assert len(queue) == 0
    assert queue.waiting == 1
    clock.step(0.1)
    assert await queue.get() == "a"
    assert queue.waiting == 0


@pytest.mark.parametrize("delay", [0.0, -1.0])
async def test_a_delay_of_zero_or_less_adds_at_once(clock: FakeClock, delay: float) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", delay)
    assert len(queue) == 1
    assert queue.waiting == 0


async def test_items_become_ready_earliest_deadline_first(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("c", 3.0)
    queue.add_after("a", 1.0)
    queue.add_after("b", 2.0)
    await clock.wait_for_sleepers()
    clock.step(3.0)
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_scheduling_a_waiting_item_again_never_postpones_it(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 5.0)
    queue.add_after("a", 10.0)
    assert queue.waiting == 1
    await clock.wait_for_sleepers()
    clock.step(5.0)
    assert await queue.get() == "a"


async def test_scheduling_a_waiting_item_earlier_moves_its_deadline_forward(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 8.0)
    await clock.wait_for_sleepers()
    queue.add_after("a", 2.0)
    await settle()
    assert clock.next_deadline() == clock.now() + 2.0
    clock.step(2.0)
    assert await queue.get() == "a"
    queue.done("a")
    clock.step(6.0)  # the superseded 8 s entry must not fire
    await settle()
    assert len(queue) == 0


async def test_a_new_earliest_deadline_wakes_the_timer_early(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("late", 8.0)
    await clock.wait_for_sleepers()
    queue.add_after("early", 1.0)
    await settle()
    clock.step(1.0)
    assert await queue.get() == "early"
    assert queue.waiting == 1


async def test_the_timer_rechecks_at_least_every_max_wait(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 25.0)
    await clock.wait_for_sleepers()
    assert clock.next_deadline() == clock.now() + MAX_WAIT


async def test_an_idle_delaying_queue_keeps_no_timer_running(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 1.0)
    await clock.wait_for_sleepers()
    clock.step(1.0)
    await queue.get()
    await settle()
    assert clock.sleepers == 0


async def test_an_immediate_add_does_not_cancel_a_pending_delayed_add(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 5.0)
    queue.add("a")
    assert await queue.get() == "a"
    queue.done("a")
    await clock.wait_for_sleepers()
    clock.step(5.0)
    assert await queue.get() == "a"


async def test_shut_down_drops_waiting_items_and_ignores_later_add_after(clock: FakeClock) -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("a", 1.0)
    await clock.wait_for_sleepers()
    queue.shut_down()
    queue.add_after("b", 1.0)
    clock.step(1.0)
    await settle()
    assert queue.waiting == 0
    assert clock.sleepers == 0
    with pytest.raises(QueueShutDownError):
        await queue.get()


async def test_every_add_after_counts_as_a_retry(clock: FakeClock, request: pytest.FixtureRequest) -> None:
    name = request.node.name
    queue: DelayingQueue[str] = DelayingQueue(name=name, clock=clock)
    queue.add_after("a", 0.0)
    queue.add_after("b", 1.0)
    queue.add("c")
    assert sample("workqueue_retries_total", name=name, controller=name) == 2
    queue.shut_down()

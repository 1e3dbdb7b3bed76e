"""One test per promise of the base work queue, plus a concurrency stress test and its metrics."""

from __future__ import annotations

import asyncio
import random

import pytest

from llmaz.runtime.workqueue import Queue, QueueShutDownError
from llmaz_dev.testing import FakeClock

from .helpers import promptly, sample, settle


async def test_items_are_handed_out_in_the_order_they_were_first_added() -> None:
    queue: Queue[str] = Queue()
    for item in ["a", "b", "c", "a", "b"]:
        queue.add(item)
    assert [await promptly(queue.get(), "a queued item") for _ in range(3)] == ["a", "b", "c"]


async def test_adds_of_an_item_already_waiting_collapse_into_one() -> None:
    queue: Queue[str] = Queue()
    for item in ["a", "a", "a", "b", "a"]:
        queue.add(item)
    assert len(queue) == 2


async def test_get_waits_until_an_item_is_added() -> None:
    queue: Queue[str] = Queue()
    getter = asyncio.create_task(queue.get())
    await settle()
    assert not getter.done()
    queue.add("a")
    assert await promptly(getter, "the getter to take the added item") == "a"


async def test_an_item_is_never_handed_to_two_workers_at_once() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    assert await promptly(queue.get(), "a queued item") == "a"
    queue.add("a")
    second_worker = asyncio.create_task(queue.get())
    await settle()
    assert not second_worker.done()
    assert len(queue) == 0
    queue.done("a")
    assert await promptly(second_worker, "the second worker to take the item once done") == "a"


async def test_an_item_added_while_processing_is_delivered_exactly_once_after_done() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    item = await promptly(queue.get(), "a queued item")
    for _ in range(3):
        queue.add("a")
    queue.done(item)
    assert len(queue) == 1
    assert await promptly(queue.get(), "the item re-added while processing") == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_done_for_an_item_that_is_not_processing_changes_nothing() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    queue.done("a")
    queue.done("b")
    assert len(queue) == 1
    assert await promptly(queue.get(), "a queued item") == "a"


async def test_a_cancelled_getter_passes_its_wake_up_to_the_next_getter() -> None:
    queue: Queue[str] = Queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it can take the item
    assert await promptly(second, "the wake-up passed on to the second getter") == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_shut_down_ignores_adds_but_still_hands_out_queued_items() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    queue.add("b")
    queue.shut_down()
    queue.add("c")
    assert queue.shutting_down
    assert [await promptly(queue.get(), "an item queued before the shut-down") for _ in "ab"] == ["a", "b"]
    with pytest.raises(QueueShutDownError):
        await promptly(queue.get(), "get to refuse on an empty queue that is shut down")


async def test_shut_down_wakes_every_waiting_getter() -> None:
    queue: Queue[str] = Queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shut_down()
    results = await promptly(asyncio.gather(*getters, return_exceptions=True), "shut_down to wake every getter")
    assert all(isinstance(result, QueueShutDownError) for result in results)


async def test_shut_down_with_drain_waits_for_items_being_processed() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    item = await promptly(queue.get(), "a queued item")
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await settle()
    assert not drain.done()
    queue.add("b")  # ignored: the queue is shutting down
    queue.done(item)
    await promptly(drain, "the drain to end once the last item was done")
    with pytest.raises(QueueShutDownError):
        await promptly(queue.get(), "get to refuse once drained")


async def test_shut_down_ends_a_drain_that_is_still_waiting() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    await promptly(queue.get(), "a queued item")
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await settle()
    assert not drain.done()
    queue.shut_down()
    await promptly(drain, "shut_down to end the drain still waiting")


async def test_shut_down_with_drain_returns_at_once_when_nothing_is_processing() -> None:
    queue: Queue[str] = Queue()
    await promptly(queue.shut_down_with_drain(), "the drain of a queue with nothing processing")
    assert queue.shutting_down


async def test_concurrent_workers_never_share_a_key_and_every_add_is_processed() -> None:
    rng = random.Random(7)
    keys = [f"key-{i}" for i in range(8)]
    queue: Queue[str] = Queue()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    tick = 0
    last_add: dict[str, int] = {}
    last_get: dict[str, int] = {}

    async def produce() -> None:
        nonlocal tick
        for _ in range(400):
            key = rng.choice(keys)
            tick += 1
            last_add[key] = tick
            queue.add(key)
            if rng.random() < 0.5:
                await asyncio.sleep(0)

    async def work() -> None:
        nonlocal tick
        while True:
            try:
                key = await queue.get()
            except QueueShutDownError:
                return
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            tick += 1
            last_get[key] = tick
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            in_flight.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(work()) for _ in range(6)]
    await asyncio.gather(*(produce() for _ in range(4)))
    queue.shut_down()  # workers still receive what is queued, then stop
    await asyncio.gather(*workers)

    assert overlaps == []
    # Every key's last add was followed by a get of that key, so no add was lost.
    assert all(last_get[key] > last_add[key] for key in last_add)


async def test_queue_metrics_follow_adds_gets_and_dones(request: pytest.FixtureRequest) -> None:
    name = request.node.name
    labels = {"name": name, "controller": name}
    clock = FakeClock()
    queue: Queue[str] = Queue(name=name, clock=clock)
    queue.add("a")
    queue.add("a")  # collapsed: not an add
    queue.add("b")
    assert sample("workqueue_adds_total", **labels) == 2
    assert sample("workqueue_depth", **labels, priority="") == 2

    clock.step(2.0)
    item = await queue.get()
    assert sample("workqueue_depth", **labels, priority="") == 1
    assert sample("workqueue_queue_duration_seconds_sum", **labels) == 2.0
    queue.add("a")  # re-added while processing: counts as an add and as depth
    assert sample("workqueue_adds_total", **labels) == 3
    assert sample("workqueue_depth", **labels, priority="") == 2

    clock.step(3.0)
    assert sample("workqueue_unfinished_work_seconds", **labels) == 3.0
    assert sample("workqueue_longest_running_processor_seconds", **labels) == 3.0
    queue.done(item)
    assert sample("workqueue_work_duration_seconds_sum", **labels) == 3.0
    assert sample("workqueue_work_duration_seconds_count", **labels) == 1
    assert sample("workqueue_unfinished_work_seconds", **labels) == 0.0


async def test_an_unnamed_queue_records_no_metrics() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    assert sample("workqueue_adds_total", name="", controller="") is None

"""How a runnable is stopped: a first cancellation lets it wind down, a second (or both at once) ends that."""

from __future__ import annotations

import asyncio

import pytest

from llmaz.runtime.runnable import (
    AnyRunnable,
    cancel_without_grace,
    grace_remains,
    run_until_cancelled,
    until_cancelled,
)

from .helpers import settle


async def started(runnable: AnyRunnable) -> asyncio.Task[None]:
    task = asyncio.create_task(run_until_cancelled(runnable))
    await settle()
    return task


class WindingDown:
    """Holds until cancelled, then winds down until `done` is set, recording whether it had grace."""

    needs_leader_election = False

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.journal: list[str] = []

    async def run(self) -> None:
        try:
            await until_cancelled()
        finally:
            if grace_remains():
                self.journal.append("winding down")
                try:
                    await self.done.wait()
                except asyncio.CancelledError:
                    self.journal.append("wind-down cut short")
                    raise
                self.journal.append("wound down")
            else:
                self.journal.append("no grace")


@pytest.mark.parametrize(
    ("then", "journal"),
    [("it finishes", ["winding down", "wound down"]), ("cancelled again", ["winding down", "wind-down cut short"])],
)
async def test_one_cancellation_lets_a_runnable_wind_down_and_a_second_cuts_that_short(
    then: str, journal: list[str]
) -> None:
    runnable = WindingDown()
    task = await started(runnable)
    task.cancel()
    await settle()
    assert not task.done()  # winding down
    if then == "it finishes":
        runnable.done.set()
    else:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runnable.journal == journal


async def test_cancelling_without_grace_skips_the_wind_down() -> None:
    runnable = WindingDown()
    task = await started(runnable)
    cancel_without_grace(task)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runnable.journal == ["no grace"]


class WithStopEvent:
    needs_leader_election = False

    def __init__(self) -> None:
        self.stopping: asyncio.Event | None = None
        self.journal: list[str] = []

    async def run(self, stopping: asyncio.Event) -> None:
        self.stopping = stopping
        await stopping.wait()
        try:
            await asyncio.Event().wait()  # a wind-down that never ends by itself
        except asyncio.CancelledError:
            self.journal.append("cancelled while winding down")
            raise


async def test_a_stop_event_runnable_gets_its_event_on_the_first_cancellation_and_is_cancelled_on_the_second() -> None:
    runnable = WithStopEvent()
    task = await started(runnable)
    assert runnable.stopping is not None
    assert not runnable.stopping.is_set()
    task.cancel()
    await settle()
    assert runnable.stopping.is_set()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runnable.journal == ["cancelled while winding down"]

"""Running Runnables for the length of a test, stopped as the manager stops them (see `llmaz.runtime.runnable`).

`started(*runnables)` runs each in its own task for the block; `running(server)` also waits until the server
listens. `stop(task)` cancels a task and waits while it winds down, re-raising what it failed with.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

from llmaz.runtime.runnable import AnyRunnable, run_until_cancelled


class _Server(Protocol):
    needs_leader_election: bool

    async def run(self) -> None: ...

    async def wait_started(self) -> None: ...


class _StopEventServer(Protocol):
    needs_leader_election: bool

    async def run(self, stopping: asyncio.Event) -> None: ...

    async def wait_started(self) -> None: ...


ServerT = TypeVar("ServerT", bound=_Server | _StopEventServer)


async def stop(task: asyncio.Task[Any], within: float = 10.0) -> None:
    """Cancel `task` (a runnable's stop) and wait while it winds down; raise what it failed with, if anything,
    or TimeoutError if it is still running after `within` seconds."""
    task.cancel()
    await asyncio.wait([task], timeout=within)
    _outcome(task, within)


@contextlib.asynccontextmanager
async def started(*runnables: AnyRunnable, within: float = 10.0) -> AsyncIterator[list[asyncio.Task[None]]]:
    """Each runnable running in its own task for the block (which gets the tasks), then all stopped together and
    given `within` seconds to wind down; the first failure among them is raised."""
    tasks = [asyncio.create_task(run_until_cancelled(r), name=type(r).__name__) for r in runnables]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=within)
        for task in tasks:
            _outcome(task, within)


@contextlib.asynccontextmanager
async def running(server: ServerT, within: float = 10.0) -> AsyncIterator[ServerT]:
    """`server` serving until the block ends, then stopped; raises its error if it fails to start, or
    TimeoutError if it does not start `within` seconds."""
    async with started(server, within=within) as (task,):
        listening = asyncio.ensure_future(server.wait_started())
        await asyncio.wait([listening, task], timeout=within, return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            if task.done():
                task.result()
            raise TimeoutError(f"{type(server).__name__} did not start in {within} s")
        yield server


def _outcome(task: asyncio.Task[Any], within: float) -> None:
    if not task.done():
        raise TimeoutError(f"{task.get_name()} still running {within} s after its stop")
    if not task.cancelled():
        task.result()

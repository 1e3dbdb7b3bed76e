"""Running a server Runnable (`run(stopping)`, `wait_started()`) for the length of a test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar


class Server(Protocol):
    async def run(self, stopping: asyncio.Event) -> None: ...

    async def wait_started(self) -> None: ...


ServerT = TypeVar("ServerT", bound=Server)


@contextlib.asynccontextmanager
async def running(server: ServerT, within: float = 10.0) -> AsyncIterator[ServerT]:
    """`server` serving until the block ends, then stopped; raises its error if it fails to start, or
    TimeoutError if it does not start `within` seconds."""
    stopping = asyncio.Event()
    task = asyncio.create_task(server.run(stopping))
    started = asyncio.ensure_future(server.wait_started())
    await asyncio.wait([started, task], timeout=within, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():
        started.cancel()
        if task.done():
            task.result()
        task.cancel()
        raise TimeoutError(f"{type(server).__name__} did not start in {within} s")
    try:
        yield server
    finally:
        stopping.set()
        await asyncio.wait_for(task, within)

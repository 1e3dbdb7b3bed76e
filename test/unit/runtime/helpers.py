"""Small event-loop helpers shared by the runtime unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from llmaz.runtime.metrics import REGISTRY


async def settle(turns: int = 50) -> None:
    """Let every ready task run for a few event-loop turns."""
    for _ in range(turns):
        await asyncio.sleep(0)


T = TypeVar("T")


async def promptly(awaitable: Awaitable[T], what: str) -> T:
    """The result of `awaitable`, which waits on nothing but tasks that are ready to run: once they have run (`settle`)
    it must be done. A regression that leaves it waiting fails here at once, saying what did not happen, instead of
    hanging until pytest-timeout ends the run."""
    task = asyncio.ensure_future(awaitable)
    await settle()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        pytest.fail(f"still waiting for {what}, after every ready task had run")
    return task.result()


def sample(metric: str, /, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


async def closed_within(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the server closes the connection (reading and dropping whatever it sends first); TimeoutError
    after `within`."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
    return time.monotonic() - started

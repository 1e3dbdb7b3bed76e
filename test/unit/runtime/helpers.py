"""Small event-loop helpers shared by the runtime unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import time

from llmaz.runtime.metrics import REGISTRY


async def settle(turns: int = 50) -> None:
    """Let every ready task run for a few event-loop turns."""
    for _ in range(turns):
        await asyncio.sleep(0)


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

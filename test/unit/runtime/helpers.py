"""Small event-loop helpers shared by the runtime unit tests."""

from __future__ import annotations

import asyncio

from llmaz.runtime.metrics import REGISTRY


async def settle(turns: int = 50) -> None:
    """Let every ready task run for a few event-loop turns."""
    for _ in range(turns):
        await asyncio.sleep(0)


def sample(metric: str, /, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)

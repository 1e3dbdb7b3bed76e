"""Polling for conditions that become true eventually (informers converging, events being written).

Limits: real time, 50 ms polls; for code that takes a Clock, step a FakeClock instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 30.0, what: str = "") -> None:
    """Poll `check` every 50 ms until it returns True; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or check}")
        await asyncio.sleep(0.05)

"""Polling for conditions that become true eventually (informers converging, objects appearing, pods ready).

`eventually` (async) and `eventually_sync` poll `check` until it returns something truthy, which they return. An
AssertionError or LookupError raised by `check` counts as "not yet" (so a check may index into an object that is
still being filled in); anything else propagates at once. For the type checker a check returns `T | False | None`
(so `cond and value` and "the object or None" checks give back `T`); `eventually` also takes an async check. mypy
types `eventually`'s result as `Any` when an async check's result type contains `Any` (both overloads match then).

Limits: real time; for code that takes a Clock, step a FakeClock instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    check: Callable[[], Awaitable[T | Literal[False] | None]],
    within: float = 30.0,
    what: str = "",
    interval: float = 0.05,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | Literal[False] | None], within: float = 30.0, what: str = "", interval: float = 0.05
) -> T: ...


async def eventually(
    check: Callable[[], Awaitable[T | Literal[False] | None] | T | Literal[False] | None],
    within: float = 30.0,
    what: str = "",
    interval: float = 0.05,
) -> T:
    """Poll `check` (sync or async) every `interval` seconds until it returns something truthy."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return result
        except (AssertionError, LookupError) as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or check} (last: {last!r})")
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T | Literal[False] | None], within: float = 30.0, what: str = "", interval: float = 0.1
) -> T:
    """`eventually` for synchronous tests (kubectl-driven e2e and deploy tests)."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except (AssertionError, LookupError) as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or check} (last: {last!r})")
        time.sleep(interval)

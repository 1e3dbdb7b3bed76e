"""Waiting in tests: the one way to wait for something to become true (informers converging, objects appearing,
pods ready, a server answering, a reconcile having run).

`eventually` (async) and `eventually_sync` poll `check` until it returns something truthy, which they return. An
AssertionError or LookupError raised by `check` counts as "not yet" (so a check may index into an object that is
still being filled in); anything else propagates at once. For the type checker a check returns `T | False | None`
(so `cond and value` and "the object or None" checks give back `T`); `eventually` also takes an async check. mypy
types `eventually`'s result as `Any` when an async check's result type contains `Any` (both overloads match then).

`eventually` first polls after every event-loop turn (for `QUICK_TURNS` turns), so a condition that tasks on this
loop bring about (fakes, a FakeClock being stepped) is seen as soon as it holds; after that, every `interval`
seconds. To assert that something did NOT happen, wait for a positive signal that it had its chance first (a
reconcile counter for the key, the resourceVersion it acted on), then assert the absence.

Limits: `within` is real time; for code that takes a Clock, step a FakeClock in the check
(`FakeClock.stepping`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Literal, TypeVar, overload

T = TypeVar("T")
QUICK_TURNS = 100


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
    """Poll `check` (sync or async) until it returns something truthy: after each of the first `QUICK_TURNS`
    event-loop turns, then every `interval` seconds."""
    wait, turns = _Wait(check, within, what), 0
    while True:
        with wait.attempt():
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return result
        wait.give_up_if_late()
        turns += 1
        await asyncio.sleep(0 if turns <= QUICK_TURNS else interval)


def eventually_sync(
    check: Callable[[], T | Literal[False] | None], within: float = 30.0, what: str = "", interval: float = 0.1
) -> T:
    """`eventually` for synchronous tests (kubectl-driven e2e and deploy tests)."""
    wait = _Wait(check, within, what)
    while True:
        with wait.attempt():
            if result := check():
                return result
        wait.give_up_if_late()
        time.sleep(interval)


class _Wait:
    """One wait's bookkeeping: why the check last said "not yet", and when to give up."""

    def __init__(self, check: object, within: float, what: str) -> None:
        self._deadline = time.monotonic() + within
        self._within = within
        self._what = what or repr(check)
        self._last: BaseException | None = None

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        """Run one check: an AssertionError or LookupError from it is "not yet", remembered for the timeout."""
        try:
            yield
        except (AssertionError, LookupError) as error:
            self._last = error

    def give_up_if_late(self) -> None:
        if time.monotonic() > self._deadline:
            raise AssertionError(f"timed out after {self._within}s waiting for {self._what} (last: {self._last!r})")

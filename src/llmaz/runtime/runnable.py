"""What the manager runs (informers, controllers, servers, certificate management), and how it stops them.

A runnable runs until its task is cancelled: there is no stop event to poll, and "sleep unless stopping" is a
plain sleep. The manager stops a runnable with at most two cancellations:
1. The stop. `run` winds down in `finally` (or `except CancelledError`): a server drains its connections, a
   controller lets its in-flight reconciles finish, the event sender writes what is queued. Then it lets the
   CancelledError propagate; a runnable never swallows it.
2. The end of grace: the graceful-shutdown period ran out, or the Lease was lost. This cancellation interrupts
   the wind-down wherever it waits. When both arrive before `run` resumes (a lost Lease, a zero grace period),
   `run` sees a single CancelledError with two requests pending: `grace_remains()` is then False, and the
   wind-down is skipped.

A runnable may also return early (its work is done, nothing to hold) or raise (the manager stops and re-raises
the error).

Runnables written against the earlier interface, `run(stopping)` with a stop event, still run, through
`run_until_cancelled`, which sets their event on the first cancellation.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, NoReturn, Protocol, TypeGuard, cast


class Runnable(Protocol):
    """A long-running component started by the manager (see the module docstring for how it stops).

    `needs_leader_election` runnables run only while this replica holds the Lease.
    """

    needs_leader_election: bool

    async def run(self) -> None: ...


class StopEventRunnable(Protocol):
    """The earlier interface: `run` returns after `stopping` is set and the component has wound down."""

    needs_leader_election: bool

    async def run(self, stopping: asyncio.Event) -> None: ...


AnyRunnable = Runnable | StopEventRunnable


async def until_cancelled() -> NoReturn:
    """Wait until the calling task is cancelled: for a runnable that only holds what it started."""
    await asyncio.get_running_loop().create_future()  # never resolved
    raise AssertionError("unreachable")


def grace_remains() -> bool:
    """In a runnable's wind-down: False once a second cancellation is pending, so stop without winding down."""
    task = asyncio.current_task()
    return task is None or task.cancelling() <= 1


def cancel_without_grace(task: asyncio.Task[Any]) -> None:
    """Cancel `task` twice at once: it stops at its next step, skipping any wind-down."""
    task.cancel()
    task.cancel()


async def run_until_cancelled(runnable: AnyRunnable) -> None:
    """Run `runnable`, whichever interface it has, until this task is cancelled (or it returns or raises)."""
    if not _takes_stop_event(runnable):
        await cast(Runnable, runnable).run()
        return
    stopping = asyncio.Event()
    inner = asyncio.ensure_future(runnable.run(stopping))
    try:
        await asyncio.shield(inner)
    except asyncio.CancelledError:
        stopping.set()
        if not grace_remains():
            inner.cancel()
        await inner  # a further cancellation of this task cancels `inner` too
        raise


def _takes_stop_event(runnable: AnyRunnable) -> TypeGuard[StopEventRunnable]:
    return bool(inspect.signature(runnable.run).parameters)

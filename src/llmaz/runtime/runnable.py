"""What the manager runs: informers, controllers, servers, certificate management."""

from __future__ import annotations

import asyncio
from typing import Protocol


class Runnable(Protocol):
    """A long-running component started by the manager.

    `run` returns after `stopping` is set and the component has wound down (a controller drains its in-flight
    reconciles). The manager cancels it if it overruns the graceful-shutdown period, so `run` must let
    `CancelledError` propagate. `needs_leader_election` runnables run only while this replica holds the Lease.
    """

    needs_leader_election: bool

    async def run(self, stopping: asyncio.Event) -> None: ...

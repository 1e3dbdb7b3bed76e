"""One shared informer per (resource, namespace, label selector, field selector), for every caller.

Invariants: `informer_for` with the same arguments returns the same informer; an informer requested while the
factory runs starts at once; stopping the factory stops every informer it started.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from llmaz.runtime.cache.informer import SharedInformer
from llmaz.runtime.client.client import Client
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.resource import Resource


class CacheSyncTimeoutError(TimeoutError):
    """Informers did not finish their first list in time; the message names them."""


@dataclass(frozen=True, slots=True)
class InformerScope:
    resource: Resource
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


class SharedInformerFactory:
    """A Runnable (not leader-elected: followers keep warm caches so a takeover starts fast)."""

    needs_leader_election = False

    def __init__(self, client: Client, *, clock: Clock = REAL_CLOCK, resync_period: float | None = None) -> None:
        self._client = client
        self._clock = clock
        self._resync_period = resync_period
        self._informers: dict[InformerScope, SharedInformer] = {}
        self._tasks: dict[InformerScope, asyncio.Task[None]] = {}
        self._stop_informers = asyncio.Event()
        self._running = False

    def informer_for(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> SharedInformer:
        scope = InformerScope(resource, namespace or None, label_selector or None, field_selector or None)
        informer = self._informers.get(scope)
        if informer is None:
            informer = SharedInformer.for_resource(
                self._client,
                resource,
                scope.namespace,
                scope.label_selector,
                scope.field_selector,
                clock=self._clock,
                resync_period=self._resync_period,
            )
            self._informers[scope] = informer
            if self._running:
                self._start(scope, informer)
        return informer

    @property
    def informers(self) -> list[SharedInformer]:
        return list(self._informers.values())

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    async def wait_for_sync(self, deadline_seconds: float) -> None:
        """Wait until every informer requested so far has synced.

        Raises CacheSyncTimeoutError, naming the laggards, after `deadline_seconds`.
        """
        waiting = [i for i in self._informers.values() if not i.has_synced()]
        if not waiting:
            return
        _, pending = await asyncio.wait(
            [asyncio.ensure_future(i.wait_for_sync()) for i in waiting], timeout=deadline_seconds
        )
        for fut in pending:
            fut.cancel()
        if pending:
            names = sorted(i.name for i in waiting if not i.has_synced())
            raise CacheSyncTimeoutError(
                f"timed out after {deadline_seconds}s waiting for caches to sync: {', '.join(names)}"
            )

    async def run(self, stopping: asyncio.Event) -> None:
        self._running = True
        for scope, informer in self._informers.items():
            self._start(scope, informer)
        try:
            await stopping.wait()
        finally:
            await self._stop_all()

    def _start(self, scope: InformerScope, informer: SharedInformer) -> None:
        if scope not in self._tasks:
            self._tasks[scope] = asyncio.create_task(
                informer.run(self._stop_informers), name=f"informer {informer.name}"
            )

    async def _stop_all(self) -> None:
        self._running = False
        self._stop_informers.set()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

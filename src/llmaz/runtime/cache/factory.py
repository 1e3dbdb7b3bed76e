"""One shared informer per (resource, namespace, label selector, field selector), for every caller.

Invariants: `informer_for` with the same arguments returns the same informer; an informer requested while the
factory runs starts at once; stopping the factory stops every informer it started.

Per-resource options (`configure`, controller-runtime's `cache.Options.ByObject`) narrow and shape every informer
of a resource, whoever asks for it: a label and/or field selector ANDed with the caller's own, and a transform
applied to each object before it is cached. A manager that only ever reads the objects it created (its labels on
them) thus never holds the rest of the cluster's Services. Configure a resource before anyone asks for its
informer: an informer already created would not match.

Problems (see `problems`): informers that cannot list for a reason retrying will not fix report it; `problems()`
collects them, `add_fix_hint` supplies what the operator should do, and `wait_for_sync` waits on such informers
past its deadline instead of failing (the problem was logged and readiness shows it; the cache fills once fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from llmaz.runtime.cache.informer import SharedInformer
from llmaz.runtime.cache.problems import SourceProblem
from llmaz.runtime.cache.transform import Transform
from llmaz.runtime.client.client import Client
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.resource import Resource
from llmaz.runtime.runnable import until_cancelled


class CacheSyncTimeoutError(TimeoutError):
    """Informers did not finish their first list in time; the message names them."""


@dataclass(frozen=True, slots=True)
class InformerScope:
    resource: Resource
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


@dataclass(frozen=True, slots=True)
class ResourceOptions:
    """How every informer of one resource is narrowed and shaped (controller-runtime's `cache.ByObject`)."""

    label_selector: str | None = None
    """ANDed with any selector a caller passes. Default: none."""
    field_selector: str | None = None
    """ANDed with any selector a caller passes. Default: none."""
    transform: Transform | None = None
    """Applied to each object before it is cached (see `transform`). Default: none."""


def _and(configured: str | None, requested: str | None) -> str | None:
    if not configured or not requested or configured == requested:
        return configured or requested or None
    return f"{configured},{requested}"


class SharedInformerFactory:
    """A Runnable (not leader-elected: followers keep warm caches so a takeover starts fast)."""

    needs_leader_election = False

    def __init__(self, client: Client, *, clock: Clock = REAL_CLOCK, resync_period: float | None = None) -> None:
        self._client = client
        self._clock = clock
        self._resync_period = resync_period
        self._informers: dict[InformerScope, SharedInformer] = {}
        self._tasks: dict[InformerScope, asyncio.Task[None]] = {}
        self._options: dict[Resource, ResourceOptions] = {}
        self._fix_hints: dict[Resource, dict[str, str]] = {}
        self._running = False

    def configure(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
    ) -> None:
        """Narrow and shape every informer of `resource` (see `ResourceOptions`). Once per resource, before any
        informer of it is requested."""
        if resource in self._options:
            raise ValueError(f"{resource} is already configured")
        if any(scope.resource == resource for scope in self._informers):
            raise RuntimeError(f"an informer of {resource} exists already: configure the resource first")
        self._options[resource] = ResourceOptions(label_selector, field_selector, transform)

    def add_fix_hint(self, resource: Resource, reason: str, fix: str) -> None:
        """What fixes problem `reason` (`problems.NOT_SERVED`, ...) of `resource`: logged and served with it."""
        self._fix_hints.setdefault(resource, {})[reason] = fix

    def informer_for(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> SharedInformer:
        options = self._options.get(resource, ResourceOptions())
        scope = InformerScope(
            resource,
            namespace or None,
            _and(options.label_selector, label_selector),
            _and(options.field_selector, field_selector),
        )
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
                fix_hints=self._fix_hints.setdefault(resource, {}),
            )
            if options.transform is not None:
                informer.set_transform(options.transform)
            self._informers[scope] = informer
            if self._running:
                self._start(scope, informer)
        return informer

    @property
    def informers(self) -> list[SharedInformer]:
        return list(self._informers.values())

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    def unsynced(self) -> list[str]:
        """Names of the informers that have not synced yet."""
        return sorted(i.name for i in self._informers.values() if not i.has_synced())

    def problems(self) -> list[SourceProblem]:
        """Every informer's current problem, one per resource and reason."""
        found = {(p.resource, p.reason): p for i in self._informers.values() if (p := i.problem) is not None}
        return [found[key] for key in sorted(found)]

    async def wait_for_sync(self, deadline_seconds: float) -> None:
        """Wait until every informer requested so far has synced.

        Raises CacheSyncTimeoutError, naming the laggards, after `deadline_seconds`, unless every laggard has a
        problem to report (a resource not served, a list forbidden): those have said why they wait, and are
        waited for without a deadline, so that installing the missing CRD (or granting the rule) is enough.
        """
        waiting = [i for i in self._informers.values() if not i.has_synced()]
        if not waiting:
            return
        pending = {asyncio.ensure_future(i.wait_for_sync()) for i in waiting}
        # The deadline runs on the factory's clock, as the reflectors' backoffs do, so one clock orders both.
        deadline = asyncio.ensure_future(self._clock.sleep(deadline_seconds))
        try:
            while pending and not deadline.done():
                _, pending = await asyncio.wait(pending | {deadline}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(deadline)
            stuck = sorted(i.name for i in waiting if not i.has_synced() and i.problem is None)
            if stuck:
                raise CacheSyncTimeoutError(
                    f"timed out after {deadline_seconds}s waiting for caches to sync: {', '.join(stuck)}"
                )
            if pending:
                await asyncio.wait(pending)
        finally:
            for future in (*pending, deadline):
                future.cancel()

    async def run(self) -> None:
        self._running = True
        for scope, informer in self._informers.items():
            self._start(scope, informer)
        try:
            await until_cancelled()
        finally:
            await self._stop_all()

    def _start(self, scope: InformerScope, informer: SharedInformer) -> None:
        if scope not in self._tasks:
            self._tasks[scope] = asyncio.create_task(informer.run(), name=f"informer {informer.name}")

    async def _stop_all(self) -> None:
        self._running = False
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

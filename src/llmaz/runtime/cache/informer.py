"""A shared informer: one reflector filling one indexed store, fanning events out to many handlers.

Invariants (the eventual-consistency contract):
- The store is updated before any handler hears of the change, so a handler reading the store sees at least
  the state it is told about.
- Handlers are called in registration order, one event at a time, from the reflector's task; per object the
  states they see are a subsequence of the real ones, with no ordering promise across objects.
- A delete the informer missed (found by a relist) arrives as `DeletedFinalStateUnknown` with the last known
  state. A delete and re-create under one name may arrive as a single update: compare `metadata.uid`.
- `has_synced()` turns true once the first list is in the store and every handler has heard of it; it never
  turns false again.
- A handler added after that point first receives a synthetic `on_add(obj, is_initial_list=True)` for each
  object already cached.
- Objects are shared, read-only dicts (see `interfaces`).
- With a transform (`set_transform`), the store and every handler see only transformed objects: the reflector's
  objects are passed through it once, on arrival, before anything else happens to them. A list from
  `ClientListWatch` is transformed page by page as it arrives, so the whole of a large list is never held
  untransformed (Python keeps the memory a peak took).
- `problem` is the reason the reflector cannot list right now when retrying will not fix it (see `problems`), or
  None; it is logged once when it appears (error, with the fix when one was registered) and once when a list
  succeeds again (info).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from llmaz.runtime.cache.interfaces import DeletedFinalStateUnknown, IndexFunc, Obj, ResourceEventHandler
from llmaz.runtime.cache.problems import SourceProblem, error_text, problem_reason
from llmaz.runtime.cache.reflector import ListFunc, Reflector, WatchFunc
from llmaz.runtime.cache.store import IndexedStore
from llmaz.runtime.client.client import Client, ObjectList
from llmaz.runtime.client.watch import WatchEvent
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import Resource, object_key
from llmaz.runtime.runnable import until_cancelled

# A list function that passes each object through a transform as its page arrives.
TransformingListFunc = Callable[[str, Callable[[Obj], Obj]], Awaitable[ObjectList]]


class ClientListWatch:
    """List and watch functions for one resource and scope, over a `Client`."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._page_size = page_size

    async def list(self, resource_version: str, transform: Callable[[Obj], Obj] | None = None) -> ObjectList:
        """The objects at `resource_version`, each passed through `transform` as its page arrives.

        "0" (any version: the first list) is asked as a consistent list, which the API server pages (from its watch
        cache since Kubernetes 1.31); at "0" it would ignore the page size and send every object in one body. A
        relist at a specific resourceVersion is unpaginated so the watch cache can serve it.
        """
        paged = resource_version in ("", "0")
        return await self._client.list(
            self._resource,
            self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            resource_version=None if paged else resource_version,
            limit=self._page_size if paged else None,
            transform=transform,
        )

    def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self._client.watch(
            self._resource,
            self._namespace,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
        )


class SharedInformer:
    """Implements `llmaz.runtime.cache.Informer` and the reflector's sink.

    `resync_period` (default None: off) replays every cached object to every handler as
    `on_update(obj, obj)` at that interval; prefer `requeue_after` in reconcilers for polling.
    `resource` names what is listed in problem reports (default: `name`); `fix_hints` maps a problem reason to
    what fixes it, read when the problem appears (so hints added to the mapping later still count).

    A Runnable on its own too: a factory runs its informers, and a test may run one alone.
    """

    needs_leader_election = False

    def __init__(
        self,
        list_fn: ListFunc,
        watch_fn: WatchFunc,
        *,
        name: str,
        transforming_list_fn: TransformingListFunc | None = None,
        clock: Clock = REAL_CLOCK,
        resync_period: float | None = None,
        rng: random.Random | None = None,
        resource: str = "",
        fix_hints: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.resource = resource or name
        self._fix_hints = fix_hints if fix_hints is not None else {}
        self._problem: SourceProblem | None = None
        self._store = IndexedStore()
        self._handlers: list[ResourceEventHandler] = []
        self._synced = asyncio.Event()
        self._clock = clock
        self._resync_period = resync_period
        self._list_fn = list_fn
        self._transforming_list_fn = transforming_list_fn
        self._reflector = Reflector(
            self._list, watch_fn, self, name=name, clock=clock, rng=rng, on_problem=self._report_problem
        )
        self._log = get_logger("llmaz.runtime.informer").bind(informer=name)
        self._transform: Callable[[Obj], Obj] | None = None
        self._started = False

    @classmethod
    def for_resource(
        cls,
        client: Client,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **options: object,
    ) -> SharedInformer:
        lw = ClientListWatch(client, resource, namespace, label_selector, field_selector)
        scope = "/".join(p for p in (str(resource), namespace, label_selector, field_selector) if p)
        return cls(
            lw.list,
            lw.watch,
            name=scope,
            resource=resource.gvr,
            transforming_list_fn=lw.list,
            **options,  # type: ignore[arg-type]
        )

    # Informer protocol

    @property
    def store(self) -> IndexedStore:
        return self._store

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        self._handlers.append(handler)
        if self.has_synced():
            for obj in self._store.list():
                self._call(handler.on_add, obj, True)

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self._store.add_indexers(indexers)

    def set_transform(self, transform: Callable[[Obj], Obj]) -> None:
        """Cache `transform(obj)` instead of each object (client-go's SetTransform), e.g. to drop fields nobody
        reads from a large, cluster-wide resource. It must keep `metadata.name` and `metadata.namespace` (the key)
        and return a new dict rather than change its argument. Only before the informer runs: objects already
        cached would otherwise keep their old shape.
        """
        if self._started:
            raise RuntimeError(f"informer {self.name} is running: set its transform before it starts")
        self._transform = transform

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        return self._reflector.last_sync_resource_version

    @property
    def problem(self) -> SourceProblem | None:
        """Why the resource cannot be listed now, when retrying will not fix it; None otherwise."""
        return self._problem

    def _report_problem(self, exc: BaseException | None) -> None:
        old = self._problem
        reason = problem_reason(exc) if exc is not None else None
        if reason is None:
            if old is not None:
                self._problem = None
                self._log.info("resource can be listed again", resource=self.resource, was=old.reason)
            return
        assert exc is not None
        if old is not None and old.reason == reason:
            return
        fix = self._fix_hints.get(reason, "")
        self._problem = problem = SourceProblem(reason, self.resource, error_text(exc), fix)
        extra = {"fix": fix} if fix else {}
        self._log.error(problem.summary, resource=self.resource, reason=reason, error=problem.error, **extra)

    async def run(self) -> None:
        """Run the reflector (and resync timer) until cancelled."""
        self._started = True
        tasks = [asyncio.create_task(self._reflector.run(), name=f"reflector {self.name}")]
        if self._resync_period:
            tasks.append(asyncio.create_task(self._resync_loop(self._resync_period)))
        try:
            await until_cancelled()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # Reflector sink

    async def _list(self, resource_version: str) -> ObjectList:
        """The reflector's list: already transformed, page by page where the list function can do it."""
        transform = self._transform
        if transform is None:
            return await self._list_fn(resource_version)
        if self._transforming_list_fn is not None:
            return await self._transforming_list_fn(resource_version, transform)
        listed = await self._list_fn(resource_version)
        return ObjectList([transform(item) for item in listed.items], listed.resource_version)

    def replace(self, items: list[Obj], resource_version: str) -> None:
        """The reflector's whole list (already transformed: see `_list`)."""
        initial = not self.has_synced()
        diff = self._store.replace(items)
        for tombstone in diff.deleted:
            self._dispatch_delete(tombstone)
        for obj in diff.added:
            self._dispatch_add(obj, initial)
        for old, new in diff.updated:
            self._dispatch_update(old, new)
        self._synced.set()

    def add(self, obj: Obj) -> None:
        if self._transform is not None:
            obj = self._transform(obj)
        old = self._store.upsert(obj)
        if old is None:
            self._dispatch_add(obj, False)
        else:
            self._dispatch_update(old, obj)

    update = add

    def delete(self, obj: Obj) -> None:
        # A delete for an object never cached (e.g. created and deleted between list and watch) is dropped.
        if self._transform is not None:
            obj = self._transform(obj)
        if self._store.delete(object_key(obj)) is not None:
            self._dispatch_delete(obj)

    # Dispatch

    def _dispatch_add(self, obj: Obj, initial: bool) -> None:
        for handler in self._handlers:
            self._call(handler.on_add, obj, initial)

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for handler in self._handlers:
            self._call(handler.on_update, old, new)

    def _dispatch_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        for handler in self._handlers:
            self._call(handler.on_delete, obj)

    def _call(self, fn: object, *args: object) -> None:
        # One failing handler must not starve the others or kill the reflector.
        try:
            fn(*args)  # type: ignore[operator]
        except Exception:
            self._log.exception("event handler failed", handler=repr(fn))

    async def _resync_loop(self, period: float) -> None:
        await self._synced.wait()
        while True:
            await self._clock.sleep(period)
            for obj in self._store.list():
                self._dispatch_update(obj, obj)
